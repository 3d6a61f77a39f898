"""leasehold_client against a real sidecar.

The sidecar's URL comes from LEASEHOLD_CLIENT_TEST_URL; LEASEHOLD_CLIENT_TEST_AUTH_URL and
LEASEHOLD_CLIENT_TEST_TOKEN_FILE name a second sidecar that wants that bearer token,
LEASEHOLD_CLIENT_TEST_UNIX_URL (unix:PATH) a third one on a Unix socket over the first one's store,
and LEASEHOLD_CLIENT_TEST_DECLARED (TASK=TTL_MS) a task declared on the first one's store. The Go
test e2e/TestPythonClientPackage starts them and runs this suite (make test); by hand:

    LEASEHOLD_CLIENT_TEST_URL=http://127.0.0.1:7411 python3 -m unittest discover -s tests

A test whose sidecar is not given skips, except under CI (CI set, as .ci/run sets it), where it
fails: there every test must run.
"""
import json
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse
import urllib.request
import uuid
from datetime import datetime
from unittest import mock

from leasehold_client import (DEFAULT_ADDR, Acquired, Client, Held, Keepalive, LeaseholdError,
                              Lost, Ran, Released, Renewed, RunOutcome, Skipped, Unavailable)

URL = os.environ.get("LEASEHOLD_CLIENT_TEST_URL", "")
AUTH_URL = os.environ.get("LEASEHOLD_CLIENT_TEST_AUTH_URL", "")
TOKEN_FILE = os.environ.get("LEASEHOLD_CLIENT_TEST_TOKEN_FILE", "")
# unix:PATH: a sidecar on a Unix socket, sharing URL's store.
UNIX_URL = os.environ.get("LEASEHOLD_CLIENT_TEST_UNIX_URL", "")
# TASK=TTL_MS: a task declared on URL's store with that ttl (and a max_ttl above it).
DECLARED = os.environ.get("LEASEHOLD_CLIENT_TEST_DECLARED", "")
HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "..", "examples", "python", "keepalive.py")
PATIENCE = 30.0  # seconds to wait for something that must happen; never a measured duration


def task_name(prefix: str) -> str:
    return f"py-test/{prefix}/{uuid.uuid4().hex[:8]}"


def closed_port_url() -> str:
    """A loopback URL nobody listens on: a port the kernel gave us, closed again."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"


def need(test: unittest.TestCase, **given: str) -> None:
    """Skips test when a variable it needs is empty, or, under CI, fails it: in CI every test
    must run against the sidecars e2e/TestPythonClientPackage starts."""
    missing = [name for name, value in given.items() if not value]
    if not missing:
        return
    why = f"{', '.join('LEASEHOLD_CLIENT_TEST_' + m for m in missing)} not set (e2e/TestPythonClientPackage sets them)"
    if os.environ.get("CI"):
        test.fail(f"{why}; under CI no test may skip")
    raise unittest.SkipTest(why)


def eventually(pred, what: str) -> None:
    stop = time.monotonic() + PATIENCE
    while not pred():
        if time.monotonic() > stop:
            raise AssertionError(f"not within {PATIENCE}s: {what}")
        time.sleep(0.05)


def ms_between(a: str, b: str) -> int:
    """The milliseconds from RFC 3339 time a to b."""
    return round((datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds() * 1000)


def ask(method: str, path: str, body: dict | None = None) -> dict:
    """Asks URL's sidecar (which wants no token) directly; the decoded JSON answer."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(URL + path, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=PATIENCE) as resp:
        return json.loads(resp.read() or b"{}")


def released_events(task: str, token: int) -> list[dict]:
    """The history's released events of task's grant with token (the newest first)."""
    events = ask("GET", f"/v1/leases/{urllib.parse.quote(task, safe='')}/history")["events"]
    return [e for e in events if e["kind"] == "released" and e["token"] == token]


def runs_total() -> dict[str, int]:
    """URL's sidecar's leasehold_runs_total by outcome. The suite's tests run one at a time, so
    a change across one test is that test's runs."""
    with urllib.request.urlopen(URL + "/metrics", timeout=PATIENCE) as resp:
        text = resp.read().decode()
    out = {m[1]: int(m[2]) for m in re.finditer(r'^leasehold_runs_total\{outcome="(\w+)"\} (\d+)$', text, re.M)}
    if len(out) != 3:
        raise AssertionError(f"leasehold_runs_total: want its three outcomes, got {out}")
    return out


class SidecarTest(unittest.TestCase):
    def setUp(self):
        need(self, URL=URL)
        self.a = Client(URL, owner="py-a#" + uuid.uuid4().hex[:6])
        self.b = Client(URL, owner="py-b#" + uuid.uuid4().hex[:6])


class ClaimRenewRelease(SidecarTest):
    def test_acquire(self):
        task = task_name("acquire")
        r = self.a.claim(task, ttl_ms=5000, note="v1")
        self.assertIsInstance(r, Acquired)
        self.assertEqual(r.lease.task, task)
        self.assertEqual(r.lease.owner, self.a.owner)
        self.assertEqual(r.lease.ttl_ms, 5000)
        self.assertEqual(r.lease.note, "v1")
        self.assertGreaterEqual(r.lease.token, 1)
        now = self.a.get(task)  # the live lease reads back
        self.assertEqual((now.owner, now.token, now.expires_at), (r.lease.owner, r.lease.token, r.lease.expires_at))

    def test_renew_sets_the_note(self):
        task = task_name("renew-note")
        r = self.a.claim(task, ttl_ms=5000, note="v1")
        self.assertIsInstance(r, Acquired)
        n = self.a.renew(task, token=r.lease.token, note="v2")
        self.assertIsInstance(n, Renewed)
        self.assertEqual(n.lease.note, "v2")
        self.assertEqual(self.a.get(task).note, "v2")
        kept = self.a.renew(task, token=r.lease.token)  # no note: the lease keeps its note
        self.assertEqual(kept.lease.note, "v2")

    def test_claim_without_ttl_sends_none(self):
        # No ttl given: the sidecar's (or the task's declared) ttl applies, not one of ours.
        r = self.a.claim(task_name("no-ttl"))
        self.assertIsInstance(r, Acquired)
        self.assertEqual(r.lease.ttl_ms, 30000)  # the sidecar's default; the suite's sidecars declare nothing

    def test_declared_ttl_applies_when_none_is_given(self):
        need(self, DECLARED=DECLARED)
        task, ttl = DECLARED.split("=")
        for hold in (lambda: self.a.claim(task), lambda: self.a.keepalive(task)):
            r = hold()
            self.assertIsInstance(r, (Acquired, Keepalive))
            self.assertEqual(r.lease.ttl_ms, int(ttl))
            if isinstance(r, Keepalive):
                r.close()
            else:
                self.assertEqual(self.a.release(task, token=r.lease.token), Released(True))
            eventually(lambda: self.a.get(task) is None, "the declared task is free again")
        p = subprocess.run([sys.executable, EXAMPLE, URL, task, "0", "--owner", "ex-declared"],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(f'"ttl_ms": {ttl}', p.stdout)

    def test_held_by_another_owner(self):
        task = task_name("held")
        first = self.a.claim(task, ttl_ms=60000)
        self.assertIsInstance(first, Acquired)
        r = self.b.claim(task, ttl_ms=60000)
        self.assertIsInstance(r, Held)
        self.assertEqual(r.holder.owner, self.a.owner)
        self.assertGreater(r.holder.ttl_remaining_ms, 0)
        self.assertLessEqual(r.holder.ttl_remaining_ms, 60000)
        self.assertIn(self.a.owner, r.detail)
        # The holder keeps its token; the refused claim changed nothing.
        self.assertEqual(self.a.get(task).token, first.lease.token)

    def test_renew_with_token_and_release(self):
        task = task_name("renew")
        lease = self.a.claim(task, ttl_ms=5000).lease
        r = self.a.renew(task, token=lease.token)
        self.assertIsInstance(r, Renewed)
        self.assertEqual(r.lease.token, lease.token)
        self.assertEqual(r.lease.renew_count, 1)
        wrong = self.a.renew(task, token=lease.token + 1)
        self.assertIsInstance(wrong, Lost)
        self.assertEqual(wrong.reason, "token_mismatch")
        self.assertEqual(self.b.renew(task).reason, "held_by_other")
        self.assertEqual(self.a.release(task, token=lease.token + 1), Released(False))
        self.assertEqual(self.b.release(task), Released(False))
        self.assertEqual(self.a.release(task, token=lease.token), Released(True))
        self.assertIsNone(self.a.get(task))
        self.assertEqual(self.a.release(task, token=lease.token), Released(False))
        after = self.a.renew(task, token=lease.token)
        self.assertIsInstance(after, Lost)
        self.assertEqual(after.reason, "not_held")
        # Free again: the next claim gets a newer fencing token.
        again = self.b.claim(task, ttl_ms=5000)
        self.assertIsInstance(again, Acquired)
        self.assertGreater(again.lease.token, lease.token)

    def test_bad_request_raises_naming_the_field(self):
        with self.assertRaises(LeaseholdError) as cm:
            self.a.claim(task_name("bad"), ttl_ms=5)
        self.assertEqual(cm.exception.status, 422)
        self.assertEqual([p["name"] for p in cm.exception.invalid_params], ["ttl_ms"])
        with self.assertRaises(LeaseholdError) as cm:
            self.a.claim("leasehold:prune")
        self.assertEqual(cm.exception.status, 403)


class UnavailableSidecar(unittest.TestCase):
    def test_closed_port_is_unavailable_never_held(self):
        c = Client(closed_port_url(), owner="nobody")
        task = task_name("down")
        for r in (c.claim(task), c.renew(task, token=1), c.release(task), c.get(task),
                  c.keepalive(task), c.run(task, lambda lease, lost: self.fail("fn ran without a lease"))):
            self.assertIsInstance(r, Unavailable)
            self.assertIsNone(r.status)
            self.assertIn("cannot reach the sidecar", r.detail)

    def test_bad_url(self):
        with self.assertRaises(ValueError):
            Client("127.0.0.1:7411")


class KeepaliveStreams(SidecarTest):
    def test_hold_renew_and_release_on_close(self):
        task = task_name("keepalive")
        renewed = threading.Event()
        events = []

        def seen(name, data):
            events.append(name)
            if name == "renewed":
                renewed.set()

        ka = self.a.keepalive(task, ttl_ms=1000, on_event=seen)
        self.assertIsInstance(ka, Keepalive)
        with ka:
            self.assertEqual(ka.lease.owner, self.a.owner)
            self.assertTrue(renewed.wait(PATIENCE), f"no renewed event; events: {events}")
            self.assertEqual(events[0], "acquired")
            self.assertFalse(ka.lost.is_set())
            self.assertTrue(ka.held())
            self.assertEqual(self.a.get(task).token, ka.token)
            rival = self.b.claim(task, ttl_ms=1000)
            self.assertIsInstance(rival, Held)
            self.assertEqual(rival.holder.owner, self.a.owner)
            # A second stream on the held task is Held too, not an exception.
            self.assertIsInstance(self.b.keepalive(task), Held)
        self.assertFalse(ka.lost.is_set(), ka.lost_reason)
        eventually(lambda: self.a.get(task) is None, "the lease is released after the holder hangs up")

    def test_loss_sets_the_event(self):
        task = task_name("loss")
        ka = self.a.keepalive(task, ttl_ms=3000)
        self.assertIsInstance(ka, Keepalive)
        with ka:
            self.assertFalse(ka.lost.is_set())
            # Out of band, the same owner releases the stream's lease through the same
            # sidecar: the sidecar ends the stream with `released` (reason release).
            self.assertEqual(self.a.release(task, token=ka.token), Released(True))
            self.assertTrue(ka.lost.wait(PATIENCE), "lost not set after the lease was released")
            self.assertEqual(ka.lost_reason.reason, "release")
            self.assertFalse(ka.held())
        # Another owner can have it now.
        self.assertIsInstance(self.b.claim(task, ttl_ms=1000), Acquired)

    def test_wait_ms_gets_the_lease_when_released(self):
        task = task_name("wait")
        first = self.b.claim(task, ttl_ms=60000).lease
        threading.Timer(0.2, lambda: self.b.release(task, token=first.token)).start()
        ka = self.a.keepalive(task, ttl_ms=2000, wait_ms=int(PATIENCE * 1000))
        self.assertIsInstance(ka, Keepalive)
        with ka:
            self.assertGreater(ka.token, first.token)


class RunHelper(SidecarTest):
    def test_run_holds_while_fn_runs_and_releases(self):
        task = task_name("run")

        def work(lease, lost):
            self.assertFalse(lost.is_set())
            now = self.b.get(task)
            self.assertEqual((now.owner, now.token), (self.a.owner, lease.token))
            self.assertIsInstance(self.b.claim(task), Held)
            return f"wrote with token {lease.token}"

        r = self.a.run(task, work, ttl_ms=2000)
        self.assertIsInstance(r, Ran)
        self.assertEqual(r.result, f"wrote with token {r.lease.token}")
        # lost is the event fn was given, as the README says, and it was never set.
        self.assertIsInstance(r.lost, threading.Event)
        self.assertFalse(r.lost.is_set())
        self.assertIsNone(r.reason)
        self.assertIn("lost=<threading.Event", repr(r))
        eventually(lambda: self.a.get(task) is None, "run releases the lease when fn returns")

    def test_run_tells_fn_when_the_lease_is_lost(self):
        task = task_name("run-lost")

        def work(lease, lost):
            self.b.release(task, token=lease.token, owner=self.a.owner)  # out of band
            return lost.wait(PATIENCE)

        r = self.a.run(task, work, ttl_ms=3000)
        self.assertIsInstance(r, Ran)
        self.assertTrue(r.result, "fn was not told the lease was lost")
        self.assertTrue(r.lost.is_set())
        self.assertEqual(r.reason.reason, "release")

    def test_run_on_a_held_task_does_not_call_fn(self):
        task = task_name("run-held")
        self.b.claim(task, ttl_ms=60000)
        r = self.a.run(task, lambda lease, lost: self.fail("fn ran without the lease"))
        self.assertIsInstance(r, Held)
        self.assertEqual(r.holder.owner, self.b.owner)

    def test_exception_in_fn_propagates_and_releases(self):
        task = task_name("run-raise")

        def work(lease, lost):
            raise RuntimeError("boom")

        with self.assertRaisesRegex(RuntimeError, "boom"):
            self.a.run(task, work, ttl_ms=2000)
        eventually(lambda: self.a.get(task) is None, "the lease is released after fn raised")


class MinimumHold(SidecarTest):
    def test_claim_rests_after_release_for_every_owner(self):
        task = task_name("min-hold")
        r = self.a.claim(task, ttl_ms=30000, min_hold_ms=60000)
        self.assertIsInstance(r, Acquired)
        lease = r.lease
        self.assertIsNotNone(lease.hold_until)
        self.assertEqual(ms_between(lease.acquired_at, lease.hold_until), 60000)
        live = self.b.claim(task)
        self.assertIsInstance(live, Held)
        self.assertEqual((live.holder.owner, live.holder.resting), (self.a.owner, False))
        self.assertEqual((live.holder.acquired_at, live.holder.hold_until), (lease.acquired_at, lease.hold_until))
        self.assertEqual(self.a.release(task, token=lease.token), Released(True, lease.hold_until))
        self.assertIsNone(self.a.get(task))
        for c in (self.b, self.a):  # its own owner too
            held = c.claim(task)
            self.assertIsInstance(held, Held, c.owner)
            h = held.holder
            self.assertEqual((h.owner, h.resting, h.acquired_at, h.hold_until), (self.a.owner, True, lease.acquired_at, lease.hold_until))
            self.assertEqual(h.expires_at, lease.hold_until)
            self.assertTrue(0 < h.ttl_remaining_ms <= 60000, h.ttl_remaining_ms)
        # Without a minimum hold, nothing says one.
        plain = self.a.claim(task_name("no-hold"), ttl_ms=30000)
        self.assertIsNone(plain.lease.hold_until)
        self.assertEqual(self.a.release(plain.lease.task, token=plain.lease.token), Released(True, None))

    def test_keepalive_hold_outlasts_the_stream(self):
        task = task_name("min-hold-ka")
        ka = self.a.keepalive(task, ttl_ms=1000, min_hold_ms=60000)
        self.assertIsInstance(ka, Keepalive)
        with ka:
            hold = ka.lease.hold_until
            self.assertEqual(ms_between(ka.lease.acquired_at, hold), 60000)
        eventually(lambda: self.a.get(task) is None, "the stream's lease is released on hang-up")
        for c in (self.b, self.a):
            held = c.keepalive(task, ttl_ms=1000)
            self.assertIsInstance(held, Held, c.owner)
            self.assertEqual((held.holder.owner, held.holder.resting, held.holder.hold_until), (self.a.owner, True, hold))


class OncePerPeriod(SidecarTest):
    PERIOD = 60000

    def replica(self, n: int) -> Client:
        return Client(URL, owner=f"py-replica-{n}#" + uuid.uuid4().hex[:6])

    def test_two_runs_in_a_row(self):
        task = task_name("once-row")
        first, second = self.replica(1), self.replica(2)
        calls = []
        during = []

        def work(lease, lost):
            calls.append(lease.owner)
            # The other replica fires while this one runs.
            during.append(second.run(task, lambda lease, lost: calls.append(lease.owner), once_per_ms=self.PERIOD))
            return "done"

        r = first.run(task, work, once_per_ms=self.PERIOD, ttl_ms=10000)
        self.assertIsInstance(r, Ran)
        self.assertIsNotNone(r.lease.hold_until, "no minimum hold")
        self.assertEqual(ms_between(r.lease.acquired_at, r.lease.hold_until), self.PERIOD // 2, "a minimum hold of half the period")
        s = during[0]
        self.assertIsInstance(s, Skipped)
        self.assertEqual((s.run_by, s.running, s.started_at), (first.owner, True, r.lease.acquired_at))
        self.assertGreater(ms_between(s.started_at, s.free_at), 0)
        for c in (second, first):  # the one that ran is skipped too
            s = c.run(task, lambda lease, lost: calls.append(lease.owner), once_per_ms=self.PERIOD)
            self.assertIsInstance(s, Skipped, c.owner)
            self.assertEqual((s.run_by, s.running, s.started_at, s.free_at), (first.owner, False, r.lease.acquired_at, r.lease.hold_until))
            self.assertTrue(s.holder.resting)
            self.assertIn(first.owner, s.detail)
        self.assertEqual(calls, [first.owner], "fn ran once")

    def test_five_replicas_jittered_exactly_one_runs(self):
        for round_ in range(3):
            task = task_name(f"once-fleet-{round_}")
            ran, results = [], [None] * 5
            lock = threading.Lock()

            def work(lease, lost):
                with lock:
                    ran.append(lease.owner)
                time.sleep(0.02)

            def fire(i: int, c: Client, delay: float):
                time.sleep(delay)
                results[i] = c.run(task, work, once_per_ms=self.PERIOD, ttl_ms=5000)

            threads = [threading.Thread(target=fire, args=(i, self.replica(i), random.uniform(0, 0.3))) for i in range(5)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(PATIENCE)
            self.assertEqual(len(ran), 1, f"round {round_}: fn ran {len(ran)} times: {ran}")
            kinds = sorted(type(r).__name__ for r in results)
            self.assertEqual(kinds, ["Ran", "Skipped", "Skipped", "Skipped", "Skipped"], f"round {round_}: {results}")
            for r in results:
                owner = r.run_by if isinstance(r, Skipped) else r.lease.owner
                self.assertEqual(owner, ran[0], f"round {round_}: {r}")

    def test_next_period_runs_once_the_hold_has_passed(self):
        task = task_name("once-next")
        first = self.replica(1).run(task, lambda lease, lost: None, once_per_ms=400, ttl_ms=5000)
        self.assertIsInstance(first, Ran)
        self.assertIsNotNone(first.lease.hold_until, "no minimum hold")
        self.assertEqual(ms_between(first.lease.acquired_at, first.lease.hold_until), 200)
        other = self.replica(2)
        stop = time.monotonic() + PATIENCE
        while True:
            r = other.run(task, lambda lease, lost: None, once_per_ms=400, ttl_ms=5000)
            if isinstance(r, Ran):
                self.assertGreaterEqual(ms_between(first.lease.hold_until, r.lease.acquired_at), 0, "granted before the hold's end")
                break
            self.assertIsInstance(r, Skipped)
            self.assertLess(time.monotonic(), stop, "the task never came free")
            time.sleep(0.02)

    def test_bad_options_raise_before_anything_is_claimed(self):
        task = task_name("once-bad")
        for kwargs, message in (({"wait_ms": 1000}, "once_per_ms, wait_ms"),
                                ({"min_hold_ms": 1000}, "once_per_ms, min_hold_ms"),
                                ({"once_per_ms": 1}, "once_per_ms"),
                                ({"once_per_ms": True}, "once_per_ms")):
            kwargs = {"once_per_ms": self.PERIOD, **kwargs}
            with self.assertRaisesRegex(ValueError, message):
                self.a.run(task, lambda lease, lost: self.fail("fn ran"), **kwargs)
        self.assertIsNone(self.a.get(task))
        self.assertEqual(ask("GET", f"/v1/leases/{urllib.parse.quote(task, safe='')}/history"), {"events": []})


class RunOutcomes(SidecarTest):
    """run() releases with the run's outcome, which the history's released event keeps."""

    def counted(self, body) -> dict[str, int]:
        before = runs_total()
        body()
        after = runs_total()
        return {k: after[k] - before[k] for k in after}

    def test_success(self):
        task = task_name("outcome-ok")
        out = []
        counted = self.counted(lambda: out.append(self.a.run(task, lambda lease, lost: time.sleep(0.05))))
        [released] = released_events(task, out[0].lease.token)
        run = dict(released.get("run") or {})
        duration = run.pop("duration_ms", None)
        self.assertEqual(run, {"outcome": "succeeded", "exit_code": 0, "error": "", "lost": False}, released)
        self.assertGreaterEqual(duration, 40, "a body that slept 50 ms")
        self.assertEqual(counted, {"succeeded": 1, "failed": 0, "lost": 0})

    def test_exception(self):
        task = task_name("outcome-raise")
        tokens = []

        def work(lease, lost):
            tokens.append(lease.token)
            raise RuntimeError("report failed: disk full")

        def body():
            with self.assertRaisesRegex(RuntimeError, "disk full"):
                self.a.run(task, work)

        counted = self.counted(body)
        [released] = released_events(task, tokens[0])
        run = released.get("run") or {}
        self.assertEqual((run.get("outcome"), run.get("error"), run.get("lost")),
                         ("failed", "RuntimeError: report failed: disk full", False), released)
        self.assertNotIn("exit_code", run, "an exception has no exit status")
        self.assertEqual(counted, {"succeeded": 0, "failed": 1, "lost": 0})
        self.assertIsNone(self.a.get(task))

    def test_long_error_is_cut_to_1024_bytes(self):
        task = task_name("outcome-long")
        tokens = []

        def work(lease, lost):
            tokens.append(lease.token)
            # "ValueError: ab\0\ud800" is 17 bytes once the NUL is dropped and the lone surrogate
            # is U+FFFD; each é is 2, so the 1024th byte starts an é that does not fit whole.
            raise ValueError("ab\0\ud800" + "é" * 700)

        with self.assertRaises(ValueError):
            self.a.run(task, work)
        [released] = released_events(task, tokens[0])
        error = (released.get("run") or {}).get("error")
        self.assertEqual(error, "ValueError: ab\ufffd" + "é" * 503, released)
        self.assertEqual(len(error.encode()), 1023)

    def test_release_with_an_exit_code(self):
        task = task_name("outcome-exit")
        lease = self.a.claim(task, ttl_ms=30000).lease
        self.assertEqual(self.a.release(task, token=lease.token, run=RunOutcome(1250, exit_code=3)), Released(True))
        [released] = released_events(task, lease.token)
        self.assertEqual(released.get("run"), {"outcome": "failed", "exit_code": 3, "error": "", "duration_ms": 1250, "lost": False})

    def test_lost_lease_is_counted(self):
        task = task_name("outcome-lost")
        out = []

        def work(lease, lost):
            # An operator ends the lease under the run.
            revoked = ask("POST", f"/v1/leases/{urllib.parse.quote(task, safe='')}/revoke", {"token": lease.token})
            self.assertTrue(revoked["released"])
            return lost.wait(PATIENCE)

        counted = self.counted(lambda: out.append(self.a.run(task, work, ttl_ms=2000)))
        r = out[0]
        self.assertIsInstance(r, Ran)
        self.assertTrue(r.result, "fn was not told the lease was lost")
        self.assertEqual(counted, {"succeeded": 0, "failed": 0, "lost": 1})
        # The revoke's released event is the grant's only one: the run's release found no lease.
        events = released_events(task, r.lease.token)
        self.assertEqual(len(events), 1, events)
        self.assertNotIn("run", events[0])


class BearerToken(unittest.TestCase):
    def setUp(self):
        need(self, AUTH_URL=AUTH_URL, TOKEN_FILE=TOKEN_FILE)

    def test_token_from_file(self):
        task = task_name("auth")
        with self.assertRaises(LeaseholdError) as cm:
            Client(AUTH_URL).claim(task)
        self.assertEqual(cm.exception.status, 401)
        c = Client(AUTH_URL, token_file=TOKEN_FILE)
        self.assertIsInstance(c.claim(task, ttl_ms=1000), Acquired)
        ka = c.keepalive(task_name("auth-ka"), ttl_ms=1000)
        self.assertIsInstance(ka, Keepalive)
        ka.close()

    def test_missing_token_file(self):
        with self.assertRaises(FileNotFoundError):
            Client(AUTH_URL, token_file=os.path.join(HERE, "no-such-token-file"))


class FromEnvironment(unittest.TestCase):
    """LEASEHOLD_ADDR and LEASEHOLD_TOKEN_FILE, read as the leasehold binary reads them, so that
    an app in a pod finds its sidecar with Client(); a token file read again when rotated."""

    def setUp(self):
        need(self, AUTH_URL=AUTH_URL, TOKEN_FILE=TOKEN_FILE)
        with open(TOKEN_FILE, encoding="utf-8") as f:
            self.token = f.read().strip()
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        env = mock.patch.dict(os.environ)
        env.start()
        self.addCleanup(env.stop)
        os.environ.pop("LEASEHOLD_ADDR", None)
        os.environ.pop("LEASEHOLD_TOKEN_FILE", None)

    def write(self, name: str, content: str) -> str:
        path = os.path.join(self.dir.name, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(content)
        return path

    def replace(self, path: str, content: str) -> None:
        """Replaces the file by a rename, as a Kubernetes Secret's volume does."""
        new = self.write("next", content)
        os.replace(new, path)

    def assertClaims(self, c: Client) -> None:
        task = task_name("env")
        r = c.claim(task, ttl_ms=5000)
        self.assertIsInstance(r, Acquired)
        self.assertEqual(c.release(task, token=r.lease.token), Released(True))

    def assertRefused(self, c: Client) -> None:
        with self.assertRaises(LeaseholdError) as cm:
            c.claim(task_name("env-refused"))
        self.assertEqual(cm.exception.status, 401)

    def test_address_and_token_file_from_env(self):
        os.environ["LEASEHOLD_ADDR"] = AUTH_URL
        os.environ["LEASEHOLD_TOKEN_FILE"] = TOKEN_FILE
        c = Client()
        self.assertEqual(c.base_url, AUTH_URL.rstrip("/"))
        self.assertClaims(c)

    def test_address_from_env(self):
        os.environ["LEASEHOLD_ADDR"] = AUTH_URL
        self.assertRefused(Client())  # no token file anywhere: none is sent
        self.assertClaims(Client(token_file=TOKEN_FILE))
        os.environ["LEASEHOLD_ADDR"] = "127.0.0.1:7411"
        with self.assertRaisesRegex(ValueError, "LEASEHOLD_ADDR"):
            Client()

    def test_token_file_from_env(self):
        os.environ["LEASEHOLD_TOKEN_FILE"] = TOKEN_FILE
        self.assertClaims(Client(AUTH_URL))
        # A token file given is read instead.
        self.assertRefused(Client(AUTH_URL, token_file=self.write("other", "not-the-token\n")))
        os.environ["LEASEHOLD_TOKEN_FILE"] = os.path.join(self.dir.name, "no-such-token")
        with self.assertRaises(FileNotFoundError):
            Client(AUTH_URL)

    def test_neither_set(self):
        self.assertEqual(Client().base_url, DEFAULT_ADDR)
        self.assertEqual(DEFAULT_ADDR, "http://127.0.0.1:7411")
        self.assertRefused(Client(AUTH_URL))

    def test_bad_token_file_is_refused_unquoted(self):
        for content in (" \n", "secret-one secret-two\n"):
            path = self.write("bad", content)
            with self.assertRaises(ValueError) as cm:
                Client(AUTH_URL, token_file=path)
            self.assertIn(path, str(cm.exception))
            self.assertNotIn("secret-one", str(cm.exception))

    def test_token_file_rotated_between_calls(self):
        path = self.write("token", "the-old-token\n")
        os.environ["LEASEHOLD_TOKEN_FILE"] = path
        c = Client(AUTH_URL)
        self.assertRefused(c)
        with open(path, "w", encoding="utf-8") as f:  # rewritten in place
            f.write(self.token + "\n")
        self.assertClaims(c)
        self.replace(path, "the-revoked-token\n")
        self.assertRefused(c)
        self.replace(path, self.token + "\n")
        self.assertClaims(c)
        ka = c.keepalive(task_name("env-ka"), ttl_ms=2000)  # a keepalive stream sends it too
        self.assertIsInstance(ka, Keepalive)
        ka.close()

    def test_token_file_gone_keeps_the_last_token(self):
        path = self.write("token", self.token + "\n")
        c = Client(AUTH_URL, token_file=path)
        os.remove(path)
        self.assertClaims(c)


class UnixSocket(unittest.TestCase):
    """A sidecar on a Unix socket (unix:PATH) that shares URL's store: what a client does over
    the socket, a client over TCP sees."""

    def setUp(self):
        need(self, UNIX_URL=UNIX_URL, URL=URL)
        self.sock = Client(UNIX_URL, owner="py-sock#" + uuid.uuid4().hex[:6])
        self.tcp = Client(URL, owner="py-tcp#" + uuid.uuid4().hex[:6])

    def test_claim_renew_release(self):
        task = task_name("unix")
        r = self.sock.claim(task, ttl_ms=60000)
        self.assertIsInstance(r, Acquired)
        self.assertEqual(self.tcp.get(task).token, r.lease.token)  # the same store, over TCP
        held = self.tcp.claim(task, ttl_ms=60000)
        self.assertIsInstance(held, Held)
        self.assertEqual(held.holder.owner, self.sock.owner)
        self.assertIsInstance(self.sock.renew(task, token=r.lease.token), Renewed)
        self.assertEqual(self.sock.get(task).renew_count, 1)
        self.assertEqual(self.sock.release(task, token=r.lease.token), Released(True))
        self.assertIsNone(self.tcp.get(task))

    def test_unix_triple_slash(self):
        # unix:///abs/path reads as the path, as sqlite:///abs/path does.
        path = UNIX_URL[len("unix:"):]
        self.assertTrue(path.startswith("/"), UNIX_URL)
        self.assertIsNone(Client("unix://" + path).get(task_name("slashes")))

    def test_keepalive_holds_and_hangup_releases(self):
        task = task_name("unix-ka")
        renewed = threading.Event()
        ka = self.sock.keepalive(task, ttl_ms=1000, on_event=lambda name, data: name == "renewed" and renewed.set())
        self.assertIsInstance(ka, Keepalive)
        with ka:
            self.assertTrue(renewed.wait(PATIENCE), "no renewed event over the socket")
            self.assertFalse(ka.lost.is_set(), ka.lost_reason)
            self.assertEqual(self.tcp.get(task).token, ka.token)
        eventually(lambda: self.tcp.get(task) is None, "the lease is released after the holder hangs up")

    def test_run(self):
        task = task_name("unix-run")
        r = self.sock.run(task, lambda lease, lost: self.tcp.get(task).owner, ttl_ms=2000)
        self.assertIsInstance(r, Ran)
        self.assertEqual(r.result, self.sock.owner)

    def test_example_script(self):
        task = task_name("unix-example")
        p = subprocess.run([sys.executable, EXAMPLE, UNIX_URL, task, "0.2", "--owner", "ex-unix"],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("working as ex-unix with fencing token", p.stdout)
        self.assertTrue(p.stdout.rstrip().endswith("done"), p.stdout)

    def test_socket_nobody_serves_on_is_unavailable(self):
        missing = UNIX_URL + ".missing"
        c = Client(missing, owner="nobody")
        task = task_name("unix-down")
        for r in (c.claim(task), c.get(task), c.keepalive(task)):
            self.assertIsInstance(r, Unavailable)
            self.assertIsNone(r.status)
            self.assertIn(f"cannot reach the sidecar at {missing}", r.detail)

    def test_bad_unix_url(self):
        for bad in ("unix:", "unix://"):
            with self.assertRaisesRegex(ValueError, "needs the socket's path"):
                Client(bad)


class ExampleScript(unittest.TestCase):
    def run_example(self, *args):
        return subprocess.run([sys.executable, EXAMPLE, *args], capture_output=True, text=True, timeout=120)

    def assertClean(self, p, code):
        self.assertEqual(p.returncode, code, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}")
        self.assertNotIn("Traceback", p.stderr)

    def test_sidecar_down(self):
        p = self.run_example(closed_port_url(), "py/report", "1")
        self.assertClean(p, 69)
        self.assertIn("unavailable: cannot reach the sidecar", p.stderr)

    def test_missing_and_bad_arguments(self):
        p = self.run_example()
        self.assertClean(p, 2)
        self.assertIn("usage:", p.stderr)
        self.assertClean(self.run_example("http://127.0.0.1:1", "t", "soon"), 2)
        p = self.run_example("127.0.0.1:7411", "t", "1")
        self.assertClean(p, 2)
        self.assertIn("base_url", p.stderr)

    def test_held_and_done(self):
        need(self, URL=URL)
        task = task_name("example")
        p = self.run_example(URL, task, "0.2", "--owner", "ex-1")
        self.assertClean(p, 0)
        self.assertIn("working as ex-1 with fencing token 1", p.stdout)
        self.assertIn('"ttl_ms": 30000', p.stdout)  # no ttl sent: the sidecar's applies
        self.assertTrue(p.stdout.rstrip().endswith("done"), p.stdout)
        eventually(lambda: Client(URL).get(task) is None, "released after the example exits")
        Client(URL, owner="other").claim(task, ttl_ms=60000)
        p = self.run_example(URL, task, "0.2")
        self.assertClean(p, 75)
        self.assertIn("not acquired", p.stderr)
        p = self.run_example(URL, task_name("bad-ttl"), "0.2", "--ttl-ms", "5")
        self.assertClean(p, 77)
        self.assertIn("ttl_ms", p.stderr)


if __name__ == "__main__":
    unittest.main()
