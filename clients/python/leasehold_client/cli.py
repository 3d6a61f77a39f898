"""The command line of leasehold_client (see __main__.py for the exit statuses)."""
from __future__ import annotations

import argparse
import json
import sys
import time

from . import Client, Held, Keepalive, LeaseholdError, Unavailable

EXIT_LOST, EXIT_USAGE, EXIT_UNAVAILABLE, EXIT_HELD, EXIT_REFUSED = 1, 2, 69, 75, 77


def _parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="Hold a leasehold lease over a keepalive stream while working.")
    p.add_argument("url", help="the sidecar's base URL, e.g. http://127.0.0.1:7411, or unix:PATH for its Unix socket")
    p.add_argument("task", help="the task to hold, e.g. nightly-report")
    p.add_argument("seconds", type=float, help="how long to work while holding the lease")
    p.add_argument("--ttl-ms", type=int, help="lease ttl in ms (default: the task's declared ttl, else the sidecar's)")
    p.add_argument("--owner", help="owner name (default: host#pid#random)")
    p.add_argument("--note", help="a note stored with the lease")
    p.add_argument("--wait-ms", type=int, help="wait up to this long for a held task")
    p.add_argument("--token-file", help="file holding the sidecar's bearer token")
    return p


def keepalive(argv: list[str], prog: str) -> int:
    args = _parser(prog).parse_args(argv)  # exits 2 with the usage on bad arguments
    if args.seconds < 0:
        print(f"{prog}: seconds: must be at least 0, got {args.seconds}", file=sys.stderr)
        return EXIT_USAGE

    def show(name: str, data: dict) -> None:
        print(f"{name}: {json.dumps(data, sort_keys=True)}", flush=True)

    try:
        client = Client(args.url, owner=args.owner, token_file=args.token_file)
        ka = client.keepalive(args.task, ttl_ms=args.ttl_ms, note=args.note, wait_ms=args.wait_ms, on_event=show)
    except (ValueError, OSError) as err:
        print(f"{prog}: {err}", file=sys.stderr)
        return EXIT_USAGE
    except LeaseholdError as err:
        print(f"{prog}: refused: {err.detail}", file=sys.stderr)
        return EXIT_REFUSED
    if isinstance(ka, Held):
        print(f"{prog}: not acquired: {ka.detail}", file=sys.stderr)
        return EXIT_HELD
    if isinstance(ka, Unavailable):
        print(f"{prog}: unavailable: {ka.detail}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    assert isinstance(ka, Keepalive)
    with ka:
        print(f"working as {ka.lease.owner} with fencing token {ka.token}", flush=True)
        # One unit of work at a time, stopping as soon as the lease is lost.
        if ka.lost.wait(args.seconds):
            why = ka.lost_reason
            print(f"{prog}: lease lost ({why.reason}: {why.detail}): stopping work", file=sys.stderr)
            return EXIT_LOST
    print("done", flush=True)
    return 0


def main(argv: list[str], prog: str = "python3 -m leasehold_client") -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(f"usage: {prog} keepalive URL TASK SECONDS [--ttl-ms N] [--owner O] [--note S] "
              f"[--wait-ms N] [--token-file PATH]", file=sys.stderr if not argv else sys.stdout)
        return EXIT_USAGE if not argv else 0
    if argv[0] != "keepalive":
        print(f"{prog}: unknown command {argv[0]!r}; the command is: keepalive", file=sys.stderr)
        return EXIT_USAGE
    try:
        return keepalive(argv[1:], f"{prog} keepalive")
    except KeyboardInterrupt:
        return 130
