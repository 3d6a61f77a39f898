"""Hold nightly-report over a keepalive stream while a job runs (Client.run), with clients/python.

    PYTHONPATH=clients/python python3 examples/python/run.py

asks the sidecar at LEASEHOLD_ADDR (default http://127.0.0.1:7411), with the bearer token in
LEASEHOLD_TOKEN_FILE when that is set (a `make run` sidecar wants none): Client() reads both, as
the leasehold binary does.
"""
from leasehold_client import Client, Held, Ran, Unavailable


def batches():
    return ["header", "rows", "totals"]                 # the units of the job


def work(lease, lost):
    for batch in batches():
        if lost.is_set():                               # the lease is gone: stop writing
            return "stopped"
        print(f"{batch} written under fencing token {lease.token}")
    return "done"


client = Client()                                       # LEASEHOLD_ADDR, LEASEHOLD_TOKEN_FILE
match client.run("nightly-report", work, wait_ms=60000):  # wait up to a minute for the lease
    case Ran(result):
        print(result)
    case Held(_, detail):
        print(f"still held after a minute: {detail}")
    case Unavailable(detail):
        print(f"nobody knows: {detail}")
