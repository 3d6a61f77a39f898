#!/usr/bin/env python3
"""Hold a leasehold lease from Python (standard library only) with a keepalive stream.

    python3 keepalive.py http://127.0.0.1:7411 nightly-report 10

claims the task `nightly-report` through the sidecar's keepalive stream, does "work" for 10
seconds while the sidecar renews the lease on its own, and lets go by closing the connection
(the sidecar then releases at once). It exits 75 when another owner holds the task, 69 when
the store is unavailable, and 1 when the lease is lost while working.

The pattern to copy: read events in a thread, keep a LOCAL deadline (monotonic clock at the
last acquired/renewed event + its ttl_remaining_ms), and stop working when it passes or when a
`lost` or `released` event arrives. Pass the fencing token to whatever your work writes to.
"""
import json
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request


class Lease:
    def __init__(self):
        self.lock = threading.Lock()
        self.deadline = 0.0  # time.monotonic() until which the lease is ours
        self.token = None
        self.owner = None
        self.ended = None  # why the lease ended, once it has

    def held(self):
        with self.lock:
            return self.ended is None and time.monotonic() < self.deadline


def read_events(resp, lease, acquired):
    name, data = None, None
    for raw in resp:
        line = raw.decode().rstrip("\n")
        if line.startswith("event: "):
            name = line[len("event: "):]
        elif line.startswith("data: "):
            data = json.loads(line[len("data: "):])
        elif line == "" and name:
            with lease.lock:
                if name in ("acquired", "renewed"):
                    lease.deadline = time.monotonic() + data["ttl_remaining_ms"] / 1000
                    lease.token, lease.owner = data["token"], data["owner"]
                else:  # lost, released
                    lease.ended = f"{name}: {data.get('reason')}"
            print(f"{name}: {json.dumps(data)}", flush=True)
            if name == "acquired":
                acquired.set()
            name, data = None, None
    with lease.lock:
        if lease.ended is None:
            lease.ended = "stream closed"


def main():
    base, task, work_seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    query = urllib.parse.urlencode({"ttl_ms": 1000})
    url = f"{base}/v1/leases/{urllib.parse.quote(task, safe='')}/keepalive?{query}"
    try:
        resp = urllib.request.urlopen(url, timeout=30)
    except urllib.error.HTTPError as err:
        body = json.load(err)
        print(f"not acquired ({err.code}): {body.get('detail')}", file=sys.stderr)
        return 75 if err.code == 409 else 69
    lease, acquired = Lease(), threading.Event()
    threading.Thread(target=read_events, args=(resp, lease, acquired), daemon=True).start()
    if not acquired.wait(30):
        print("no acquired event", file=sys.stderr)
        return 69
    print(f"working as {lease.owner} with fencing token {lease.token}", flush=True)
    stop = time.monotonic() + work_seconds
    while time.monotonic() < stop:
        if not lease.held():
            print(f"lease lost ({lease.ended or 'local deadline passed'}): stopping work", file=sys.stderr)
            return 1
        time.sleep(0.05)  # one unit of work
    resp.close()  # the sidecar releases the lease when we hang up
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
