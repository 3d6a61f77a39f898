"""A leasehold client in Python's standard library, used by the e2e tests.

usage: client.py BASE_URL   (e.g. http://127.0.0.1:7411)
Exits non-zero with a message on the first answer that breaks the contract.
"""
import json
import sys
import urllib.error
import urllib.request

BASE = sys.argv[1]


def call(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(BASE + path, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as err:
        return err.code, json.load(err)


def expect(cond, what, answer):
    if not cond:
        sys.exit(f"FAIL: {what}: {answer}")


status, body = call("POST", "/v1/leases/py:report/claim", {"owner": "py-1", "ttl_ms": 5000, "note": "from python"})
expect(status == 200 and body["acquired"] is True, "claim", body)
lease = body["lease"]
token = lease["token"]
expect(lease["note"] == "from python" and 0 < lease["ttl_remaining_ms"] <= 5000, "lease fields", lease)

status, body = call("POST", "/v1/leases/py:report/claim", {"owner": "py-2"})
expect(status == 409 and body["reason"] == "held" and body["holder"]["owner"] == "py-1", "rival refused", body)

status, body = call("POST", "/v1/leases/py:report/renew", {"owner": "py-1", "token": token, "ttl_ms": 8000})
expect(status == 200 and body["renewed"] is True and body["lease"]["ttl_ms"] == 8000, "renew", body)

status, body = call("POST", "/v1/leases/py:report/renew", {"owner": "py-1", "token": token + 1})
expect(status == 409 and body["reason"] == "token_mismatch", "renew with a wrong token", body)

status, body = call("POST", "/v1/leases/py:report/release", {"owner": "py-1", "token": token})
expect(status == 200 and body["released"] is True, "release", body)
status, body = call("POST", "/v1/leases/py:report/release", {"owner": "py-1", "token": token})
expect(status == 200 and body["released"] is False, "second release is a no-op", body)

status, body = call("POST", "/v1/leases/py:report/claim", {"owner": "bad owner\n"})
expect(status in (400, 422) and "owner" in json.dumps(body), "bad owner refused naming the field", body)

print("ok")
