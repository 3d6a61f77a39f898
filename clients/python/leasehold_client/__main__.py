"""python3 -m leasehold_client keepalive URL TASK SECONDS [options]: hold TASK's lease over a
keepalive stream for SECONDS of "work", printing every event. Exit status: 0 done (released
by hanging up), 1 the lease was lost while working, 2 bad arguments, 69 the sidecar or its
store is unavailable, 75 another owner holds the task, 77 the sidecar refused the request
(credentials, a bad task name or ttl)."""
import sys

from .cli import main

sys.exit(main(sys.argv[1:]))
