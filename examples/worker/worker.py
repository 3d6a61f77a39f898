#!/usr/bin/env python3
"""A demo worker for the compose fleet: it works on a shared task only while it holds its lease.

    python3 examples/worker/worker.py --sidecar http://127.0.0.1:7411 [--task demo-report]
        [--ttl-ms N] [--token-file PATH] [--interval SECONDS]

It holds the task over a keepalive stream of its sidecar (the sidecar renews the lease), logs
a `work` line with the lease's fencing token every interval while it holds it, and stops at
once when the lease is lost (a `lost` event, the stream breaking, or the local deadline
passing), then goes back to waiting for the task. With no --ttl-ms the task's declared ttl
applies. Every line carries `mono=`, time.monotonic(): on one machine it orders the lines of
several workers (e2e/worker_test.go does). SIGTERM hangs up, which releases the lease.
"""
import argparse
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python"))

from leasehold_client import Client, Held, LeaseholdError, Unavailable  # noqa: E402


def log(event: str, **fields) -> None:
    kv = " ".join(f"{k}={json.dumps(v) if isinstance(v, str) else v}" for k, v in fields.items())
    print(f"{event} mono={time.monotonic():.6f} {kv}".rstrip(), flush=True)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description="Work on a task only while holding its lease.")
    p.add_argument("--sidecar", required=True, help="the sidecar's base URL, http://HOST:PORT")
    p.add_argument("--task", default="demo-report", help="the shared task (default demo-report)")
    p.add_argument("--ttl-ms", type=int, help="the lease's ttl (default: the task's declared ttl)")
    p.add_argument("--token-file", help="a file holding the sidecar's bearer token")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between units of work")
    args = p.parse_args(argv)
    try:
        client = Client(args.sidecar, token_file=args.token_file)
    except (OSError, ValueError) as err:
        p.error(str(err))
    # Leave through the `with` below on `docker compose stop`: hanging up releases the lease.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    log("start", owner=client.owner, task=args.task)
    while True:
        try:
            ka = client.keepalive(args.task, ttl_ms=args.ttl_ms)
        except LeaseholdError as err:  # a wrong token or ttl: retrying cannot help
            log("refused", status=err.status, detail=err.detail)
            return 77
        if isinstance(ka, Held):
            log("held", by=ka.holder.owner if ka.holder else "")
            time.sleep(args.interval / 2)
            continue
        if isinstance(ka, Unavailable):
            log("unavailable", detail=ka.detail)
            time.sleep(args.interval)
            continue
        with ka:
            log("acquired", token=ka.token)
            while ka.held():  # false once lost, or past the local deadline
                log("work", token=ka.token)  # a real worker passes ka.token to what it writes
                ka.lost.wait(args.interval)
            log("lost", token=ka.token, reason=ka.lost_reason.reason if ka.lost_reason else "deadline")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
