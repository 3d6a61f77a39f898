"""A small client for the leasehold sidecar's HTTP API (Python 3.11+, standard library only).

    from leasehold_client import Client, Acquired, Held, Unavailable

    client = Client()  # the sidecar LEASEHOLD_ADDR names, with LEASEHOLD_TOKEN_FILE's token
    client = Client("http://127.0.0.1:7411")            # token_file="/run/secrets/leasehold"
    client = Client("unix:/run/leasehold/leasehold.sock")  # a sidecar on a Unix socket
    match client.claim("nightly-report", ttl_ms=30000):
        case Acquired(lease):   ...  # pass lease.token to whatever the work writes to
        case Held(holder):      ...  # another owner has it: holder.owner, holder.ttl_remaining_ms
        case Unavailable(detail): ...  # the sidecar or its store cannot answer: NOT "held"

Outcomes of the lease protocol (acquired, held, renewed, lost, unavailable) are returned as
values, never raised. Only a request the sidecar refuses as wrong (400, 401, 403, 404, 413, 415,
422: a bad task name or ttl, a missing bearer token, an undeclared task) raises LeaseholdError,
since retrying it cannot help.

`client.keepalive(task)` holds a lease over the sidecar's keepalive stream (the sidecar renews
it; closing the holder releases it) and sets `holder.lost`, a threading.Event, when the lease
is lost. `client.run(task, fn)` holds the lease while `fn(lease, lost)` runs, and releases it
with the run's outcome, which the task's history keeps. A claim, a stream or a run may ask for
a minimum hold (`min_hold_ms`): the task then rests, refused to every claimant, until the
lease's acquisition plus that, however early the lease ends. `client.run(task, fn,
once_per_ms=PERIOD)` is the scheduled-job mode: of the replicas that fire a job within half a
period of each other one runs it, and the others get `Skipped` (who ran it, and when).
"""
from __future__ import annotations

import http.client
import json
import os
import re
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = [
    "Client", "Lease", "Holder", "Acquired", "Held", "Unavailable", "Renewed", "Lost",
    "Released", "Ran", "Skipped", "RunOutcome", "Keepalive", "LeaseholdError", "default_owner",
    "ENV_ADDR", "ENV_TOKEN_FILE", "DEFAULT_ADDR",
]

ENV_ADDR = "LEASEHOLD_ADDR"
"""The environment variable naming the sidecar's address, as the leasehold binary reads it."""
ENV_TOKEN_FILE = "LEASEHOLD_TOKEN_FILE"
"""The environment variable naming a file that holds the sidecar's bearer token."""
DEFAULT_ADDR = "http://127.0.0.1:7411"
"""The address asked when neither base_url nor LEASEHOLD_ADDR names one: the sidecar's default."""

_MAX_TOKEN_BYTES = 4096  # a token file holds one token, as the leasehold binary reads it
_MAX_RUN_ERROR_BYTES = 1024  # a run's error text, in bytes of UTF-8: the sidecar's bound
_SURROGATE = re.compile("[\ud800-\udfff]")  # a str may hold one; UTF-8 cannot


@dataclass(frozen=True)
class Lease:
    """A lease as the sidecar reports it; `token` is the fencing token. `hold_until` is the end
    of the lease's minimum hold (`min_hold_ms`), None when it has none: the task is granted to
    nobody before it, its owner included, even after a release or an expiry."""
    task: str
    owner: str
    token: int
    ttl_ms: int
    ttl_remaining_ms: int
    acquired_at: str = ""
    renewed_at: str = ""
    expires_at: str = ""
    renew_count: int = 0
    note: str = ""
    hold_until: str | None = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Lease:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass(frozen=True)
class Holder:
    """Who holds a task another owner asked for: the owner of a live lease, or, with `resting`,
    the owner of a lease that ended (released or expired) inside its minimum hold, which keeps
    the task from every claimant until `hold_until`. `expires_at` is when the task may next be
    granted as far as the store knows: the live lease's expiry, or the end of the hold."""
    owner: str
    ttl_remaining_ms: int
    expires_at: str = ""
    acquired_at: str = ""
    hold_until: str | None = None
    resting: bool = False

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Holder:
        return cls(d.get("owner", ""), d.get("ttl_remaining_ms", 0), d.get("expires_at", ""),
                   d.get("acquired_at", ""), d.get("hold_until"), d.get("resting") is True)


@dataclass(frozen=True)
class Acquired:
    lease: Lease


@dataclass(frozen=True)
class Held:
    """Another owner holds the task, or it rests in a minimum hold (holder.resting): the claim
    was answered, and the answer is no."""
    holder: Holder | None
    detail: str = ""


@dataclass(frozen=True)
class Unavailable:
    """The sidecar or its store could not answer (status None: the sidecar was not reached).

    Nothing is known about the lease: never treat this as "held" or as "free"."""
    detail: str
    status: int | None = None


@dataclass(frozen=True)
class Renewed:
    lease: Lease


@dataclass(frozen=True)
class Lost:
    """A renewal was refused: the lease is no longer yours (reason: not_held, expired,
    held_by_other, token_mismatch; or deadline for a keepalive stream)."""
    reason: str
    detail: str = ""


@dataclass(frozen=True)
class Released:
    """`released` False: there was nothing of yours to release. `hold_until`: the end of the
    released lease's minimum hold when it has not passed (the task rests until then), else None."""
    released: bool
    hold_until: str | None = None


@dataclass(frozen=True)
class RunOutcome:
    """What a job run under a lease did, sent with its release (run() sends it): the task's
    history keeps it on the released event. `exit_code` (0 to 255) or `error` says how it ended
    (at most 1024 bytes of the error's UTF-8 are sent); `lost`, that the lease was lost while it
    ran."""
    duration_ms: int
    exit_code: int | None = None
    error: str | None = None
    lost: bool = False

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"duration_ms": max(0, int(self.duration_ms))}
        if self.exit_code is not None:
            d["exit_code"] = self.exit_code
        if self.error is not None:
            d["error"] = _run_error_text(self.error)
        if self.lost:
            d["lost"] = True
        return d


def _run_error_text(text: str) -> str:
    """text as a run's outcome may carry it, as the Go client's leasecore.TruncateText makes it:
    valid UTF-8 (a lone surrogate becomes U+FFFD) without NUL (dropped), cut to at most 1024
    bytes on a character boundary."""
    raw = _SURROGATE.sub("\ufffd", text.replace("\0", "")).encode("utf-8")
    # A cut inside a character leaves a partial one at the end, which the decoding drops.
    return raw[:_MAX_RUN_ERROR_BYTES].decode("utf-8", errors="ignore")


def _raised_text(err: BaseException) -> str:
    """What an exception says, as a run's error: its type and text, never empty."""
    text = str(err)
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


@dataclass(frozen=True)
class Ran:
    """run()'s answer when fn ran: its result, the lease it ran under, `lost`, the
    threading.Event fn was given (set when the lease was lost while fn ran), and `reason`,
    why it was lost (None when it was not)."""
    result: Any
    lease: Lease
    lost: threading.Event
    reason: Lost | None = None


@dataclass(frozen=True)
class Skipped:
    """run()'s answer in the scheduled-job mode (once_per_ms) when this period's job is another
    replica's: fn was not called. `run_by` ran it (or runs it), starting at `started_at`;
    `running` is True while that run goes on (its lease is live) and False once it is done (the
    task rests); `free_at` is when the task may next be granted. A healthy outcome, as Held is."""
    run_by: str
    started_at: str
    running: bool
    free_at: str
    holder: Holder
    detail: str = ""


class LeaseholdError(Exception):
    """The sidecar refused the request as wrong (a 4xx other than 409): fix the request."""

    def __init__(self, status: int, problem: dict[str, Any]):
        self.status = status
        self.problem = problem
        self.type = problem.get("type", "")
        self.detail = problem.get("detail") or problem.get("title") or f"HTTP {status}"
        self.invalid_params = problem.get("invalid_params", [])
        super().__init__(f"leasehold: {status}: {self.detail}")


def default_owner() -> str:
    """host#pid#random: unique per process and per call."""
    return f"{socket.gethostname()}#{os.getpid()}#{os.urandom(4).hex()}"


def _task_path(task: str, verb: str = "") -> str:
    path = "/v1/leases/" + urllib.parse.quote(task, safe="")
    return f"{path}/{verb}" if verb else path


class _UnixHTTPConnection(http.client.HTTPConnection):
    """An HTTPConnection over a Unix socket; its requests carry Host: localhost, as
    `curl --unix-socket PATH http://localhost/...` sends them."""

    def __init__(self, path: str, timeout: float | None):
        super().__init__("localhost", timeout=timeout)
        self._socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self._socket_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def _read_token(path: str) -> str:
    """The token in the file at path: its content without the white space around it. Raises
    OSError or ValueError, whose text never quotes the content."""
    with open(path, "rb") as f:
        raw = f.read(_MAX_TOKEN_BYTES + 1)
    if len(raw) > _MAX_TOKEN_BYTES:
        raise ValueError(f"token file {path}: larger than {_MAX_TOKEN_BYTES} bytes; it should hold one token")
    tok = raw.decode("utf-8", errors="replace").strip()
    if not tok:
        raise ValueError(f"token file {path}: it is empty")
    if any(c.isspace() for c in tok):
        raise ValueError(f"token file {path}: want one token without white space")
    return tok


class _TokenFile:
    """A bearer token file, read again before every request so that a rotated token (a
    Kubernetes Secret's volume swaps the file's content) is sent from the next request on. A
    read that fails (the file briefly missing while it is replaced) keeps the last token read:
    the sidecar answers 401 if that one is no longer accepted."""

    def __init__(self, path: str):
        self.path = path
        self._token = _read_token(path)  # a missing or bad file fails here, at once
        self._lock = threading.Lock()

    def current(self) -> str:
        try:
            tok = _read_token(self.path)
        except (OSError, ValueError):
            with self._lock:
                return self._token
        with self._lock:
            self._token = tok
        return tok


class Client:
    """A client of one sidecar, at `base_url`: http://HOST:PORT, https://HOST:PORT, or
    unix:PATH for a sidecar serving on a Unix socket (`leasehold serve --listen unix:PATH`).

    As the leasehold binary does, a `base_url` not given is LEASEHOLD_ADDR's (else
    http://127.0.0.1:7411) and a `token_file` not given is LEASEHOLD_TOKEN_FILE's (else no
    token), so that an app in a pod beside its sidecar needs only `Client()`. The token file is
    read here (a missing or bad one raises) and again before every request, so that a rotated
    token is used from the next request on. `owner` defaults to default_owner(). Safe to share
    between threads."""

    def __init__(self, base_url: str | None = None, *, owner: str | None = None,
                 token_file: str | None = None, timeout: float = 30.0):
        field = "base_url"
        if base_url is None:
            base_url = os.environ.get(ENV_ADDR) or DEFAULT_ADDR
            if os.environ.get(ENV_ADDR):
                field = ENV_ADDR
        if token_file is None:
            token_file = os.environ.get(ENV_TOKEN_FILE) or None
        self._socket: str | None = None
        if base_url.startswith("unix:"):
            # unix:///abs/path and unix://rel read as paths too, as the store's sqlite: does.
            path = base_url[len("unix:"):].removeprefix("//")
            if not path or "\0" in path:
                raise ValueError(f"{field}: unix: needs the socket's path, as in unix:/run/leasehold/leasehold.sock, got {base_url!r}")
            self.base_url = base_url
            self._socket, self._scheme, self._netloc, self._prefix = path, "http", "localhost", ""
        else:
            u = urllib.parse.urlsplit(base_url)
            if u.scheme not in ("http", "https") or not u.hostname:
                raise ValueError(f"{field}: want http://HOST:PORT, https://HOST:PORT or unix:PATH, got {base_url!r}")
            self.base_url = base_url.rstrip("/")
            self._scheme, self._netloc, self._prefix = u.scheme, u.netloc, u.path.rstrip("/")
        self.owner = owner or default_owner()
        self.timeout = timeout
        self._token_file = _TokenFile(token_file) if token_file is not None else None

    # --- HTTP ---

    def _connect(self, timeout: float | None) -> http.client.HTTPConnection:
        if self._socket is not None:
            return _UnixHTTPConnection(self._socket, timeout)
        cls = http.client.HTTPSConnection if self._scheme == "https" else http.client.HTTPConnection
        return cls(self._netloc, timeout=timeout)

    def _headers(self, body: bytes | None) -> dict[str, str]:
        h = {"Accept": "application/json"}
        if body is not None:
            h["Content-Type"] = "application/json"
        if self._token_file is not None:
            h["Authorization"] = "Bearer " + self._token_file.current()
        return h

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None
              ) -> tuple[int, dict[str, Any]] | Unavailable:
        data = None if body is None else json.dumps(body).encode()
        conn = self._connect(self.timeout)
        try:
            conn.request(method, self._prefix + path, body=data, headers=self._headers(data))
            resp = conn.getresponse()
            raw = resp.read()
        except (OSError, http.client.HTTPException) as err:
            return Unavailable(f"cannot reach the sidecar at {self.base_url}: {err}")
        finally:
            conn.close()
        try:
            doc = json.loads(raw) if raw else {}
        except ValueError:
            doc = {"detail": raw[:200].decode(errors="replace")}
        if resp.status >= 500:
            return Unavailable(doc.get("detail") or f"HTTP {resp.status}", resp.status)
        return resp.status, doc

    # --- the lease protocol ---

    def claim(self, task: str, *, ttl_ms: int | None = None, note: str | None = None,
              owner: str | None = None, min_hold_ms: int | None = None) -> Acquired | Held | Unavailable:
        """Claim task. With no ttl_ms the task's declared ttl (or the sidecar's default) applies.
        With min_hold_ms (1 ms to 31 days) the task rests, refused to every claimant, until the
        lease's acquisition plus that, even if the lease is released or expires before then; a
        claim of a resting task is Held with holder.resting True."""
        body: dict[str, Any] = {"owner": owner or self.owner}
        if ttl_ms is not None:
            body["ttl_ms"] = ttl_ms
        if note is not None:
            body["note"] = note
        if min_hold_ms is not None:
            body["min_hold_ms"] = min_hold_ms
        r = self._call("POST", _task_path(task, "claim"), body)
        if isinstance(r, Unavailable):
            return r
        status, doc = r
        if status == 200:
            return Acquired(Lease.from_json(doc["lease"]))
        if status == 409:
            h = doc.get("holder")
            return Held(Holder.from_json(h) if h else None, doc.get("detail", ""))
        raise LeaseholdError(status, doc)

    def renew(self, task: str, *, token: int | None = None, ttl_ms: int | None = None,
              owner: str | None = None, note: str | None = None) -> Renewed | Lost | Unavailable:
        """Renew task; with token, only that lease (a newer one of the same owner is not renewed).
        With note, the lease's note becomes it (the history's renewed event keeps it)."""
        body: dict[str, Any] = {"owner": owner or self.owner}
        if token is not None:
            body["token"] = token
        if ttl_ms is not None:
            body["ttl_ms"] = ttl_ms
        if note is not None:
            body["note"] = note
        r = self._call("POST", _task_path(task, "renew"), body)
        if isinstance(r, Unavailable):
            return r
        status, doc = r
        if status == 200:
            return Renewed(Lease.from_json(doc["lease"]))
        if status == 409:
            return Lost(doc.get("reason", ""), doc.get("detail", ""))
        raise LeaseholdError(status, doc)

    def release(self, task: str, *, token: int | None = None, owner: str | None = None,
                run: RunOutcome | None = None) -> Released | Unavailable:
        """Release task if this owner (and, with token, this lease) holds it. With run, the
        outcome of the job run under the lease, which the history's released event keeps."""
        body: dict[str, Any] = {"owner": owner or self.owner}
        if token is not None:
            body["token"] = token
        if run is not None:
            body["run"] = run.to_json()
        r = self._call("POST", _task_path(task, "release"), body)
        if isinstance(r, Unavailable):
            return r
        status, doc = r
        if status == 200:
            return Released(bool(doc.get("released")), doc.get("hold_until"))
        raise LeaseholdError(status, doc)

    def get(self, task: str) -> Lease | None | Unavailable:
        """The task's live lease, or None when nobody holds it."""
        r = self._call("GET", _task_path(task))
        if isinstance(r, Unavailable):
            return r
        status, doc = r
        if status != 200:
            raise LeaseholdError(status, doc)
        return Lease.from_json(doc["lease"]) if doc.get("held") else None

    # --- keepalive streams ---

    def keepalive(self, task: str, *, ttl_ms: int | None = None, note: str | None = None,
                  wait_ms: int | None = None, owner: str | None = None,
                  on_event: Callable[[str, dict[str, Any]], None] | None = None,
                  min_hold_ms: int | None = None) -> Keepalive | Held | Unavailable:
        """Open a keepalive stream on task: the sidecar renews the lease while the stream is
        open and releases it when the holder is closed. on_event(name, data) sees every event
        (acquired, renewed, lost, released) from the reader thread. With min_hold_ms, the task
        rests until the lease's acquisition plus that, however early the stream ends."""
        q: dict[str, Any] = {"owner": owner or self.owner}
        if ttl_ms is not None:
            q["ttl_ms"] = ttl_ms
        if note is not None:
            q["note"] = note
        if min_hold_ms is not None:
            q["min_hold_ms"] = min_hold_ms
        if wait_ms is not None:
            q["wait_ms"] = wait_ms
        path = self._prefix + _task_path(task, "keepalive") + "?" + urllib.parse.urlencode(q)
        # The socket timeout bounds the wait for the answer (wait_ms on top); the stream's own
        # liveness is watched by the holder's local deadline, so reads then block untimed.
        conn = self._connect(self.timeout + (wait_ms or 0) / 1000)
        try:
            conn.request("GET", path, headers={**self._headers(None), "Accept": "text/event-stream"})
            sock = conn.sock
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as err:
            conn.close()
            return Unavailable(f"cannot reach the sidecar at {self.base_url}: {err}")
        if resp.status != 200:
            try:
                raw = resp.read()
            except (OSError, http.client.HTTPException):
                raw = b""
            conn.close()
            try:
                doc = json.loads(raw) if raw else {}
            except ValueError:
                doc = {}
            if resp.status == 409:
                h = doc.get("holder")
                return Held(Holder.from_json(h) if h else None, doc.get("detail", ""))
            if resp.status >= 500:
                return Unavailable(doc.get("detail") or f"HTTP {resp.status}", resp.status)
            raise LeaseholdError(resp.status, doc)
        ka = Keepalive(task, conn, sock, resp, on_event, self)
        first = ka._start()
        if first is not None:
            return first
        return ka

    def run(self, task: str, fn: Callable[[Lease, threading.Event], Any], *,
            ttl_ms: int | None = None, note: str | None = None, wait_ms: int | None = None,
            owner: str | None = None, min_hold_ms: int | None = None,
            once_per_ms: int | None = None) -> Ran | Held | Skipped | Unavailable:
        """Hold task over a keepalive stream while fn(lease, lost) runs, then release it.

        fn gets the lease (lease.token is the fencing token) and `lost`, a threading.Event set
        when the lease is lost: fn should check it between units of work (or wait on it) and
        stop writing once it is set. The release carries the run's outcome, which the task's
        history keeps: exit_code 0 when fn returned, the exception ("Type: text", cut to 1024
        bytes) when it raised, lost when `lost` was set by then, and the duration. An exception
        from fn propagates after the release.

        once_per_ms is the scheduled-job mode (exclusive with wait_ms and min_hold_ms; a
        ValueError otherwise): the lease is claimed with a minimum hold of half the period
        (whole ms), so that of the replicas whose schedulers fire the job within half a period
        of each other one runs it, and the others get Skipped, never Held."""
        if once_per_ms is not None:
            if isinstance(once_per_ms, bool) or not isinstance(once_per_ms, (int, float)) or not once_per_ms >= 2:
                raise ValueError(f"once_per_ms: the period in ms, at least 2 (the minimum hold is half of it), got {once_per_ms!r}")
            if wait_ms is not None:
                raise ValueError("once_per_ms, wait_ms: exclusive; a replica that finds this period's job taken is skipped, not kept waiting")
            if min_hold_ms is not None:
                raise ValueError("once_per_ms, min_hold_ms: exclusive; once_per_ms holds the task for half the period")
            min_hold_ms = int(once_per_ms // 2)
        ka = self.keepalive(task, ttl_ms=ttl_ms, note=note, wait_ms=wait_ms, owner=owner, min_hold_ms=min_hold_ms)
        if isinstance(ka, Held) and once_per_ms is not None:
            return _skipped(ka)
        if not isinstance(ka, Keepalive):
            return ka
        start = time.monotonic()
        outcome = None
        try:
            result = fn(ka.lease, ka.lost)
            outcome = RunOutcome(_ms_since(start), exit_code=0, lost=ka.lost.is_set())
            return Ran(result, ka.lease, ka.lost, ka.lost_reason)
        except BaseException as err:
            outcome = RunOutcome(_ms_since(start), error=_raised_text(err), lost=ka.lost.is_set())
            raise
        finally:
            ka.release(run=outcome)


def _ms_since(start: float) -> int:
    return int((time.monotonic() - start) * 1000)


def _skipped(held: Held) -> Skipped:
    """A held answer to a scheduled-job run, as its Skipped."""
    h = held.holder or Holder("", 0)
    return Skipped(h.owner, h.acquired_at, not h.resting, h.expires_at, h, held.detail)


class Keepalive:
    """A lease held over a keepalive stream. `lost` is set when the lease is lost: a `lost` or
    `released` event, the stream ending, or the local deadline (monotonic time of the last
    acquired/renewed event + its ttl_remaining_ms) passing with no newer event.
    close() (or leaving a `with` block) hangs up, and the sidecar releases the lease; release()
    releases it first (with the outcome of a run, if given), then hangs up."""

    def __init__(self, task: str, conn: http.client.HTTPConnection, sock: socket.socket | None,
                 resp: http.client.HTTPResponse, on_event, client: Client):
        self.task = task
        self._client = client
        self.lost = threading.Event()
        self.lease: Lease | None = None
        self.lost_reason: Lost | None = None
        self._conn, self._sock, self._resp, self._on_event = conn, sock, resp, on_event
        self._lock = threading.Lock()
        self._deadline = 0.0
        self._ended = threading.Event()  # lost or closed: the watchdog stops
        self._first = threading.Event()
        self._reader: threading.Thread | None = None

    @property
    def token(self) -> int:
        assert self.lease is not None
        return self.lease.token

    def held(self) -> bool:
        """True while the lease is ours by the local deadline and no loss was seen."""
        with self._lock:
            return not self.lost.is_set() and time.monotonic() < self._deadline

    def _start(self) -> Unavailable | None:
        self._reader = threading.Thread(target=self._read, name=f"leasehold-keepalive-{self.task}", daemon=True)
        self._reader.start()
        self._first.wait()
        if self.lease is None:
            self.close()
            why = self.lost_reason.detail if self.lost_reason else "no acquired event"
            return Unavailable(f"keepalive stream on {self.task!r} ended before the lease was acquired: {why}")
        threading.Thread(target=self._watch, name=f"leasehold-deadline-{self.task}", daemon=True).start()
        return None

    def _lose(self, reason: str, detail: str) -> None:
        with self._lock:
            if self.lost.is_set() or self._ended.is_set():
                return
            self.lost_reason = Lost(reason, detail)
            self.lost.set()
            self._ended.set()

    def _read(self) -> None:
        name, data = None, []
        try:
            for raw in self._resp:
                line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                if line.startswith(":"):
                    continue
                if line.startswith("event:"):
                    name = line[6:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].lstrip(" "))
                elif line == "" and name:
                    self._event(name, json.loads("\n".join(data) or "{}"))
                    name, data = None, []
        except Exception as err:  # noqa: BLE001 - any failure of the stream ends the lease
            self._lose("stream", f"the keepalive stream broke: {err}")
        self._lose("stream", "the keepalive stream ended")
        self._first.set()

    def _event(self, name: str, data: dict[str, Any]) -> None:
        if name in ("acquired", "renewed"):
            with self._lock:
                self.lease = Lease.from_json(data)
                self._deadline = time.monotonic() + data.get("ttl_remaining_ms", 0) / 1000
        elif name in ("lost", "released"):
            self._lose(data.get("reason", name), data.get("detail") or name)
        if self._on_event is not None:
            self._on_event(name, data)
        if name == "acquired":
            if self._sock is not None:
                self._sock.settimeout(None)  # from now on the local deadline watches the stream
            self._first.set()

    def _watch(self) -> None:
        while True:
            with self._lock:
                left = self._deadline - time.monotonic()
            if left <= 0:
                self._lose("deadline", "no renewal was confirmed before the lease's local deadline")
                return
            if self._ended.wait(left):
                return

    def release(self, run: RunOutcome | None = None) -> None:
        """Release the lease (owner- and token-checked; with run, the outcome of the job run under
        it, which the task's history keeps), then hang up: the task is free, or rests in its
        minimum hold, when this returns if the sidecar answered; if it did not, the hang-up
        releases it. From the call on, a loss is none: `lost` is not set by it. Never raises."""
        with self._lock:
            self._ended.set()
        if self.lease is not None:
            try:
                self._client.release(self.task, token=self.lease.token, owner=self.lease.owner, run=run)
            except LeaseholdError:
                pass  # a refused release: the hang-up releases the lease all the same
        self.close()

    def close(self) -> None:
        """Hang up: the sidecar releases the lease (owner- and token-checked)."""
        with self._lock:
            self._ended.set()
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        # The shutdown ends the reader's read; wait for it before closing what it reads.
        if self._reader is not None and self._reader is not threading.current_thread():
            self._reader.join(5)
        self._resp.close()
        self._conn.close()

    def __enter__(self) -> Keepalive:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
