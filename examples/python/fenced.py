"""Claim nightly-report and write the report to the job's own SQLite database, fenced by the
lease's token, with clients/python.

    touch reports.db && leasehold fence install --db sqlite:reports.db
    PYTHONPATH=clients/python python3 examples/python/fenced.py reports.db

asks the sidecar at LEASEHOLD_ADDR (default http://127.0.0.1:7411), with the bearer token in
LEASEHOLD_TOKEN_FILE when that is set. A holder paused past its lease (a GC pause, a frozen VM)
wakes up to a refused write, not to a row landing after its successor's.
"""
import sqlite3
import sys

from leasehold_client import Acquired, Client, Held, Unavailable
from leasehold_client.fence import StaleToken, fence

TASK = "nightly-report"

db = sqlite3.connect(sys.argv[1] if len(sys.argv) > 1 else "reports.db")
db.execute("CREATE TABLE IF NOT EXISTS reports (token INTEGER NOT NULL, body TEXT NOT NULL)")

client = Client()                                       # LEASEHOLD_ADDR, LEASEHOLD_TOKEN_FILE
match client.claim(TASK, ttl_ms=30000):
    case Acquired(lease):
        try:
            with db:                                    # one transaction: the check, then the write
                fence(db, TASK, lease.token)            # a newer holder has written: StaleToken
                db.execute("INSERT INTO reports VALUES (?, ?)", (lease.token, "totals"))
            print(f"report written under fencing token {lease.token}")
        except StaleToken as stale:                     # rolled back: nothing was written
            print(f"token {stale.token} is stale (a newer holder wrote under {stale.highest}): stop")
        finally:
            client.release(TASK, token=lease.token)
    case Held(holder):
        print(f"{holder.owner} has it for another {holder.ttl_remaining_ms} ms")
    case Unavailable(detail):
        print(f"nobody knows: {detail}")                # retry later; do not assume free or held
