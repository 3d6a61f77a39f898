"""Claim nightly-report, work under the lease, renew it, and release it, with clients/python.

    PYTHONPATH=clients/python python3 examples/python/claim.py

asks the sidecar at LEASEHOLD_ADDR (default http://127.0.0.1:7411), with the bearer token in
LEASEHOLD_TOKEN_FILE when that is set (a `make run` sidecar wants none): Client() reads both, as
the leasehold binary does.
"""
from leasehold_client import Acquired, Client, Held, Lost, Renewed, Unavailable

TASK = "nightly-report"


def write_report(part: str, fencing_token: int) -> None:
    # Hand the fencing token to whatever the job writes to, so that it can refuse a stale holder.
    print(f"{part} written under fencing token {fencing_token}")


client = Client()                                       # LEASEHOLD_ADDR, LEASEHOLD_TOKEN_FILE
match client.claim(TASK, ttl_ms=30000):                  # no ttl_ms: the task's declared ttl
    case Acquired(lease):
        try:
            write_report("part 1", lease.token)
            match client.renew(TASK, token=lease.token):
                case Renewed(lease):
                    write_report("part 2", lease.token)
                case Lost(reason):                       # not_held, expired, held_by_other, token_mismatch
                    print(f"lost the lease ({reason}): stop writing")
        finally:
            client.release(TASK, token=lease.token)     # also when the work raised
    case Held(holder):
        print(f"{holder.owner} has it for another {holder.ttl_remaining_ms} ms")
    case Unavailable(detail):
        print(f"nobody knows: {detail}")                # retry later; do not assume free or held
