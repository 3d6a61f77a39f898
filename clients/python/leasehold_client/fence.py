"""Fencing at the resource: the check a job's own database runs on the task and token a holder
presents, so that a holder superseded while it was paused cannot write; and the same check in
front of a WSGI application.

The DDL is leasehold's (``leasehold fence sql --dialect postgres|sqlite`` prints it, ``leasehold
fence install --db URL`` applies it). These helpers only call it, through any DB-API 2.0
connection or cursor (``sqlite3`` from the standard library, psycopg2, psycopg 3, pg8000), so
the client depends on no driver. docs/guarantees.md "Fencing at the resource" says what fencing
adds and what it cannot.

    with conn:                                  # one transaction: the check, then the write
        fence(conn, "nightly-report", token)    # StaleToken: a newer holder wrote; roll back
        conn.execute("INSERT INTO reports ...")
"""

from __future__ import annotations

import json
import re
import sqlite3
from typing import Any, Callable, Iterable

__all__ = [
    "HEADER_TASK", "HEADER_TOKEN", "STALE_SQLSTATE",
    "PROBLEM_STALE_TOKEN", "PROBLEM_FENCE_REQUIRED", "PROBLEM_INVALID_FENCE", "PROBLEM_FENCE_UNAVAILABLE",
    "StaleToken", "FenceNotInstalled", "fence", "fence_headers", "FenceMiddleware",
]

# The request headers that carry a holder's task and token to an HTTP resource.
HEADER_TASK = "Leasehold-Task"
HEADER_TOKEN = "Leasehold-Token"

# The problem types (RFC 9457) FenceMiddleware answers with: the Go middleware's own.
PROBLEM_STALE_TOKEN = "urn:leasehold:problem:stale-token"
PROBLEM_FENCE_REQUIRED = "urn:leasehold:problem:fence-required"
PROBLEM_INVALID_FENCE = "urn:leasehold:problem:invalid-fence"
PROBLEM_FENCE_UNAVAILABLE = "urn:leasehold:problem:fence-unavailable"

# PostgreSQL's SQLSTATE for a stale token, raised by the fence's guard trigger.
STALE_SQLSTATE = "LH001"

_POSTGRES_CHECK = "SELECT leasehold_fence(%s, %s)"
_SQLITE_CHECK = ("INSERT INTO leasehold_fence (task, token) VALUES (?, ?) ON CONFLICT (task) DO UPDATE "
                 "SET token = excluded.token, updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')")
_SQLITE_HIGHEST = "SELECT token FROM leasehold_fence WHERE task = ?"
_SQLITE_STALE = "leasehold_fence: stale token"
_SQLITE_MISSING = "no such table: leasehold_fence"
_NOT_INSTALLED = ("42883", "42P01")  # undefined function, undefined table
_HIGHEST_RE = re.compile(r"highest seen is (\d+)")
_MAX_TOKEN = (1 << 63) - 1


class StaleToken(Exception):
    """The token is lower than the highest one the resource has seen for the task: a newer
    holder has written since. The write must not happen; roll the transaction back."""

    def __init__(self, task: str, token: int, highest: int):
        detail = f": highest seen is {highest}" if highest > 0 else ""
        super().__init__(f"stale fencing token {token} for task {json.dumps(task)}{detail}")
        self.task = task
        self.token = token
        # The highest token seen for the task, or 0 when it could not be read.
        self.highest = highest


class FenceNotInstalled(Exception):
    """The resource database has no fence: apply `leasehold fence sql` or run `leasehold fence
    install`."""

    def __init__(self) -> None:
        super().__init__("fence: the leasehold_fence table or function is missing from this database: "
                         "apply `leasehold fence sql` or run `leasehold fence install`")


def _check(task: Any, token: Any) -> int:
    if not isinstance(task, str) or task.strip() == "":
        raise ValueError("task: a non-empty task name")
    if isinstance(token, bool) or not isinstance(token, int) or not 1 <= token <= _MAX_TOKEN:
        raise ValueError(f"token: an integer of at least 1 (the lease's fencing token), not {token!r}")
    return token


def _sqlstate(err: BaseException) -> str | None:
    # psycopg2 names it pgcode, psycopg 3 sqlstate; pg8000 puts it in args[0]["C"].
    for name in ("sqlstate", "pgcode"):
        code = getattr(err, name, None)
        if isinstance(code, str):
            return code
    if err.args and isinstance(err.args[0], dict):
        code = err.args[0].get("C")
        if isinstance(code, str):
            return code
    return None


def fence(conn: Any, task: str, token: int, dialect: str | None = None) -> int:
    """Check task's token against the resource's fence, inside the caller's transaction: a higher
    token is recorded, an equal one accepted, a lower one refused with StaleToken (the transaction
    must then be rolled back). conn is a DB-API connection or cursor on which the writing
    transaction is open. dialect: "sqlite" (the default for a sqlite3 connection or cursor) or
    "postgres" (the default otherwise; %s placeholders, as psycopg and pg8000 take). A database
    without the fence raises FenceNotInstalled. Returns the token accepted."""
    t = _check(task, token)
    if dialect is None:
        dialect = "sqlite" if isinstance(conn, (sqlite3.Connection, sqlite3.Cursor)) else "postgres"
    if dialect not in ("postgres", "sqlite"):
        raise ValueError(f"dialect: postgres or sqlite, not {dialect!r}")
    cur = conn.cursor() if hasattr(conn, "cursor") else conn
    try:
        if dialect == "postgres":
            try:
                cur.execute(_POSTGRES_CHECK, (task, t))
                cur.fetchall()
            except Exception as err:
                code = _sqlstate(err)
                if code == STALE_SQLSTATE:
                    m = _HIGHEST_RE.search(str(err))
                    raise StaleToken(task, t, int(m.group(1)) if m else 0) from err
                if code in _NOT_INSTALLED:
                    raise FenceNotInstalled() from err
                raise
            return t
        try:
            cur.execute(_SQLITE_CHECK, (task, t))
        except Exception as err:
            text = str(err)
            if _SQLITE_STALE in text:
                highest = 0
                try:  # RAISE(ABORT) undid the statement only: the transaction still reads
                    cur.execute(_SQLITE_HIGHEST, (task,))
                    row = cur.fetchone()
                    highest = int(row[0]) if row else 0
                except Exception:
                    pass  # the refusal stands; only its detail is missing
                raise StaleToken(task, t, highest) from err
            if _SQLITE_MISSING in text:
                raise FenceNotInstalled() from err
            raise
        return t
    finally:
        if cur is not conn:
            cur.close()


def fence_headers(task: str, token: int) -> dict[str, str]:
    """The headers a request to a fenced HTTP resource carries: Leasehold-Task and
    Leasehold-Token."""
    t = _check(task, token)
    return {HEADER_TASK: task, HEADER_TOKEN: str(t)}


_ENVIRON_TASK = "HTTP_" + HEADER_TASK.upper().replace("-", "_")
_ENVIRON_TOKEN = "HTTP_" + HEADER_TOKEN.upper().replace("-", "_")


class FenceMiddleware:
    """Fences every request to a WSGI application: reads the Leasehold-Task and Leasehold-Token
    headers, runs the check in a transaction of its own on a connection from connect() (which it
    commits, so the token is recorded, and closes), and only when the token is accepted calls the
    application, with environ["leasehold.fence"] = (task, token). Otherwise it answers a problem
    document (application/problem+json) and the application does not run: 409 stale-token (with
    task, token, highest_token), 428 fence-required (a header missing), 400 invalid-fence (an empty
    task, a token that is not a decimal integer of at least 1, a header given twice), 503
    fence-unavailable (the database failed or has no fence; the cause goes to on_error, never to
    the answer).

    It alone refuses a holder already superseded when its request came; one superseded while the
    application runs is refused only by a fence inside the application's own write transaction
    (fence() with environ["leasehold.fence"])."""

    def __init__(self, app: Callable[..., Iterable[bytes]], connect: Callable[[], Any], *,
                 dialect: str | None = None, on_error: Callable[[BaseException], None] | None = None):
        if not callable(app):
            raise TypeError("app: the WSGI application to fence")
        if not callable(connect):
            raise TypeError("connect: a function returning a new DB-API connection to the resource database")
        if dialect not in (None, "postgres", "sqlite"):
            raise ValueError(f"dialect: postgres or sqlite, not {dialect!r}")
        self.app, self.connect, self.dialect = app, connect, dialect
        self.on_error = on_error or (lambda err: None)

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        read = _read_headers(environ)
        if isinstance(read, dict):
            return _problem(start_response, read)
        task, token = read
        try:
            self._check(task, token)
        except StaleToken as err:
            doc: dict[str, Any] = {"type": PROBLEM_STALE_TOKEN, "title": "Stale fencing token", "status": 409,
                                   "detail": str(err), "task": err.task, "token": err.token}
            if err.highest > 0:
                doc["highest_token"] = err.highest
            return _problem(start_response, doc)
        except Exception as err:  # the database failed: the cause is the operator's, not the caller's
            self.on_error(err)
            detail = ("the resource database has no fence installed" if isinstance(err, FenceNotInstalled)
                      else "the fence check could not run on the resource database")
            return _problem(start_response, {"type": PROBLEM_FENCE_UNAVAILABLE, "title": "Fence unavailable",
                                             "status": 503, "detail": detail})
        environ["leasehold.fence"] = (task, token)
        return self.app(environ, start_response)

    def _check(self, task: str, token: int) -> None:
        conn = self.connect()
        try:
            try:
                fence(conn, task, token, self.dialect)
            except BaseException:
                conn.rollback()
                raise
            conn.commit()
        finally:
            conn.close()


def _read_headers(environ: dict[str, Any]) -> tuple[str, int] | dict[str, Any]:
    """The task and token, or the problem that refuses them: a missing header before a malformed
    one. WSGI servers join a repeated header with ", ", which neither a valid token nor, here,
    a task given once holds."""
    task, token = environ.get(_ENVIRON_TASK), environ.get(_ENVIRON_TOKEN)
    missing = [name for name, v in ((HEADER_TASK, task), (HEADER_TOKEN, token)) if v is None]
    if missing:
        detail = (f"{missing[0]} header is required" if len(missing) == 1
                  else f"{HEADER_TASK} and {HEADER_TOKEN} headers are required")
        return {"type": PROBLEM_FENCE_REQUIRED, "title": "Fencing token required", "status": 428, "detail": detail}

    def invalid(detail: str) -> dict[str, Any]:
        return {"type": PROBLEM_INVALID_FENCE, "title": "Invalid fencing header", "status": 400, "detail": detail}

    if ", " in task:
        return invalid(f"{HEADER_TASK} header must be given once")
    if "," in token:
        return invalid(f"{HEADER_TOKEN} header must be given once")
    if task.strip() == "":
        return invalid(f"{HEADER_TASK} header must not be empty")
    digits = token.strip()
    if not digits.isascii() or not digits.isdigit() or not 1 <= int(digits) <= _MAX_TOKEN:
        return invalid(f"{HEADER_TOKEN} header must be a decimal integer of at least 1")
    return task, int(digits)


_REASONS = {400: "Bad Request", 409: "Conflict", 428: "Precondition Required", 503: "Service Unavailable"}


def _problem(start_response: Callable[..., Any], doc: dict[str, Any]) -> list[bytes]:
    body = json.dumps(doc).encode()
    start_response(f"{doc['status']} {_REASONS[doc['status']]}",
                   [("Content-Type", "application/problem+json"), ("Content-Length", str(len(body)))])
    return [body]
