"""A chaos-test lease client in Python's standard library (e2e/chaos runs it).

It behaves like the harness's Go clients: claim a random task of the pool with
a random ttl, renew a few times with the token, then release, or abandon the
lease, sometimes renewing once more after it expired. It prints one JSON line
per operation: what was sent, the wall-clock call and return times in
nanoseconds, and the HTTP status, Content-Type and raw body, or the transport
error (a timeout, a refused or cut connection, an answer cut short). It
judges nothing: the Go side classifies every answer, and a lost answer is
never taken as a fact.

It runs until its stdin is closed (the harness decides when the load ends),
or at most --duration seconds.
"""
import argparse
import json
import random
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

ap = argparse.ArgumentParser()
ap.add_argument("--urls", required=True)
ap.add_argument("--task-prefix", required=True)
ap.add_argument("--tasks", type=int, required=True)
ap.add_argument("--owner", required=True)
ap.add_argument("--seed", type=int, default=0)
ap.add_argument("--duration", type=float, required=True)
ap.add_argument("--min-ttl-ms", type=int, default=300)
ap.add_argument("--max-ttl-ms", type=int, default=800)
ap.add_argument("--timeout", type=float, default=1.0)
args = ap.parse_args()

urls = args.urls.split(",")
rng = random.Random(args.seed * 7919 + time.time_ns())
deadline = time.monotonic() + args.duration
stopped = threading.Event()


def watch_stdin():
    sys.stdin.read()  # until EOF: the harness closed it
    stopped.set()


threading.Thread(target=watch_stdin, daemon=True).start()


def running():
    return not stopped.is_set() and time.monotonic() < deadline


def op(kind, task, token, ttl_ms):
    body = {"owner": args.owner}
    if token:
        body["token"] = token
    if ttl_ms:
        body["ttl_ms"] = ttl_ms
    url = rng.choice(urls) + "/v1/leases/" + urllib.parse.quote(task, safe="") + "/" + kind
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    rec = {"client": args.owner, "kind": kind, "task": task, "owner": args.owner, "token": token,
           "ttl_ms": ttl_ms, "status": 0, "content_type": "", "body": "", "error": ""}
    rec["call_ns"] = time.time_ns()
    try:
        with urllib.request.urlopen(req, timeout=args.timeout) as resp:
            rec["status"] = resp.status
            rec["content_type"] = resp.headers.get("Content-Type", "")
            rec["body"] = resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as err:
        rec["status"] = err.code
        rec["content_type"] = err.headers.get("Content-Type", "") if err.headers else ""
        try:
            rec["body"] = err.read().decode("utf-8", "replace")
        except Exception as e:  # the answer was cut: its status alone binds nothing
            rec["status"], rec["error"] = 0, "reading the answer: " + repr(e)
    except Exception as e:  # timeout, refused, reset: indeterminate
        rec["error"] = repr(e)
    rec["return_ns"] = time.time_ns()
    print(json.dumps(rec), flush=True)
    if rec["status"] in (200, 409) and not rec["error"]:
        try:
            return rec["status"], json.loads(rec["body"])
        except ValueError:
            pass
    return 0, None


def pause(seconds):
    stopped.wait(max(0.0, min(seconds, deadline - time.monotonic())))


while running():
    task = args.task_prefix + str(rng.randrange(args.tasks))
    ttl = rng.randint(args.min_ttl_ms, args.max_ttl_ms)
    status, answer = op("claim", task, 0, ttl)
    if status != 200 or not answer.get("acquired"):
        pause(rng.uniform(0.005, 0.03))
        continue
    token = answer["lease"]["token"]
    lost = False
    for _ in range(rng.randrange(3)):
        pause(ttl / 1000 * rng.uniform(0.2, 0.4))
        if not running():
            break
        status, answer = op("renew", task, token, ttl)
        if status == 409:
            lost = True
            break
    if lost or not running():
        continue
    p = rng.random()
    if p < 0.65:
        op("release", task, token, 0)
    elif p >= 0.85:
        pause(ttl / 1000 + rng.uniform(0.02, 0.1))
        if running():
            op("renew", task, token, ttl)
sys.exit(0)
