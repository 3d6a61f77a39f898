#!/usr/bin/env python3
"""Hold a leasehold lease from Python with a keepalive stream, using clients/python.

    python3 keepalive.py http://127.0.0.1:7411 nightly-report 10 [--ttl-ms N] [--token-file PATH]
    python3 keepalive.py unix:/run/leasehold/leasehold.sock nightly-report 10   # a sidecar on a Unix socket

claims the task `nightly-report` through the sidecar's keepalive stream, does "work" for 10
seconds while the sidecar renews the lease on its own, and lets go by hanging up (the sidecar
then releases at once). With no --ttl-ms the task's declared ttl applies. It exits 75 when
another owner holds the task, 69 when the sidecar or its store is unavailable, 77 when the
sidecar refuses the request, 2 on bad arguments, and 1 when the lease is lost while working.

The same as `python3 -m leasehold_client keepalive ...` with clients/python on PYTHONPATH; the
pattern to copy is in clients/python/leasehold_client (Client.keepalive and Client.run).
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python"))

from leasehold_client.cli import keepalive  # noqa: E402

if __name__ == "__main__":
    sys.exit(keepalive(sys.argv[1:], os.path.basename(sys.argv[0])))
