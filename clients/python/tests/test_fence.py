"""leasehold_client.fence against real databases: a SQLite file and a PostgreSQL database that
`leasehold fence install` fenced, and a PostgreSQL database without the fence (e2e's
TestPythonClientPackage makes them). The WSGI middleware runs behind wsgiref on 127.0.0.1."""

import json
import os
import sqlite3
import tempfile
import threading
import unittest
import urllib.error
import urllib.request
from wsgiref.simple_server import WSGIRequestHandler, make_server

from leasehold_client.fence import (HEADER_TASK, HEADER_TOKEN, PROBLEM_FENCE_REQUIRED, PROBLEM_FENCE_UNAVAILABLE,
                                    PROBLEM_INVALID_FENCE, PROBLEM_STALE_TOKEN, FenceMiddleware, FenceNotInstalled,
                                    StaleToken, fence, fence_headers)

SQLITE_PATH = os.environ.get("LEASEHOLD_TEST_FENCE_SQLITE_PATH", "")  # a file `leasehold fence install` fenced
PG_URL = os.environ.get("LEASEHOLD_TEST_FENCE_PG_URL", "")  # a database `leasehold fence install` fenced
BARE_PG_URL = os.environ.get("LEASEHOLD_TEST_BARE_PG_URL", "")  # a database without the fence


def need(test, **env):
    missing = [k for k, v in env.items() if not v]
    if missing:
        test.skipTest("set by e2e's TestPythonClientPackage: " + ", ".join(missing))


def psycopg2_or_skip(test):
    try:
        import psycopg2  # the tests' PostgreSQL driver (Debian's python3-psycopg2); the client needs none
    except ImportError:
        test.skipTest("psycopg2 is not installed")
    return psycopg2


class SQLiteFence(unittest.TestCase):
    def setUp(self):
        need(self, LEASEHOLD_TEST_FENCE_SQLITE_PATH=SQLITE_PATH)
        self.db = sqlite3.connect(SQLITE_PATH, isolation_level=None, timeout=30)
        self.db.execute("CREATE TABLE IF NOT EXISTS rows (task TEXT, token INTEGER, v TEXT)")
        self.task = "py-fence/" + os.urandom(4).hex()

    def tearDown(self):
        self.db.close()

    def write(self, token, value):
        """One fenced write: the check and the row in one transaction, rolled back when refused."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            fence(self.db, self.task, token)
            self.db.execute("INSERT INTO rows VALUES (?, ?, ?)", (self.task, token, value))
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def rows(self):
        return [r[0] for r in self.db.execute("SELECT v FROM rows WHERE task = ? ORDER BY rowid", (self.task,))]

    def test_higher_and_equal_tokens_write_a_lower_one_is_refused(self):
        self.write(3, "a")
        self.write(3, "b")  # the same holder again
        self.write(5, "c")  # a newer holder
        with self.assertRaises(StaleToken) as cm:
            self.write(4, "late")  # the holder superseded by 5, waking up
        err = cm.exception
        self.assertEqual((err.task, err.token, err.highest), (self.task, 4, 5))
        self.assertIn("stale fencing token 4", str(err))
        self.assertEqual(self.rows(), ["a", "b", "c"], "the refused write must not land")
        self.assertEqual(self.db.execute("SELECT token FROM leasehold_fence WHERE task = ?", (self.task,)).fetchone()[0], 5)

    def test_a_cursor_works_as_the_connection_does(self):
        cur = self.db.cursor()
        self.assertEqual(fence(cur, self.task, 2), 2)
        with self.assertRaises(StaleToken):
            fence(cur, self.task, 1)

    def test_a_database_without_the_fence(self):
        with tempfile.TemporaryDirectory() as d:
            bare = sqlite3.connect(os.path.join(d, "bare.db"))
            try:
                with self.assertRaises(FenceNotInstalled) as cm:
                    fence(bare, self.task, 1)
                self.assertIn("leasehold fence install", str(cm.exception))
            finally:
                bare.close()

    def test_bad_arguments_are_refused_before_any_statement(self):
        for task, token, field in [("", 1, "task"), ("  ", 1, "task"), (None, 1, "task"), (self.task, 0, "token"),
                                   (self.task, -3, "token"), (self.task, "7", "token"), (self.task, True, "token"),
                                   (self.task, 1 << 63, "token"), (self.task, 2.0, "token")]:
            with self.subTest(task=task, token=token):
                with self.assertRaises(ValueError) as cm:
                    fence(self.db, task, token)
                self.assertTrue(str(cm.exception).startswith(field + ":"), cm.exception)
        with self.assertRaises(ValueError) as cm:
            fence(self.db, self.task, 1, dialect="mysql")
        self.assertIn("dialect", str(cm.exception))
        self.assertIsNone(self.db.execute("SELECT token FROM leasehold_fence WHERE task = ?", (self.task,)).fetchone(),
                          "nothing may be written for bad arguments")

    def test_fence_headers(self):
        self.assertEqual(fence_headers("nightly", 12), {HEADER_TASK: "nightly", HEADER_TOKEN: "12"})
        with self.assertRaises(ValueError):
            fence_headers("nightly", 0)


class PostgresFence(unittest.TestCase):
    def setUp(self):
        need(self, LEASEHOLD_TEST_FENCE_PG_URL=PG_URL, LEASEHOLD_TEST_BARE_PG_URL=BARE_PG_URL)
        self.pg = psycopg2_or_skip(self)
        self.conn = self.pg.connect(PG_URL)
        with self.conn, self.conn.cursor() as cur:
            cur.execute("CREATE TABLE IF NOT EXISTS rows (task text, token bigint, v text)")
        self.task = "py-fence/" + os.urandom(4).hex()

    def tearDown(self):
        self.conn.close()

    def write(self, conn, token, value):
        with conn, conn.cursor() as cur:  # psycopg2: commit on success, roll back on an exception
            fence(cur, self.task, token)
            cur.execute("INSERT INTO rows VALUES (%s, %s, %s)", (self.task, token, value))

    def rows(self):
        with self.conn, self.conn.cursor() as cur:
            cur.execute("SELECT v FROM rows WHERE task = %s ORDER BY ctid", (self.task,))
            return [r[0] for r in cur.fetchall()]

    def test_higher_and_equal_tokens_write_a_lower_one_is_refused(self):
        self.write(self.conn, 3, "a")
        self.write(self.conn, 3, "b")
        self.write(self.conn, 5, "c")
        with self.assertRaises(StaleToken) as cm:
            self.write(self.conn, 4, "late")
        err = cm.exception
        self.assertEqual((err.task, err.token, err.highest), (self.task, 4, 5), "highest comes from the guard's message")
        self.assertEqual(getattr(err.__cause__, "pgcode", None), "LH001")
        self.assertEqual(self.rows(), ["a", "b", "c"])

    def test_the_row_lock_orders_two_holders(self):
        # The newer holder's check waits on the older one's open transaction; once the newer one
        # has committed, the older one (resumed) is refused.
        self.write(self.conn, 1, "first")
        older = self.pg.connect(PG_URL)
        newer = self.pg.connect(PG_URL)
        try:
            cur = older.cursor()
            fence(cur, self.task, 1)  # open transaction, holding the fence row
            done = threading.Event()

            def newer_writes():
                self.write(newer, 2, "newer")
                done.set()
            th = threading.Thread(target=newer_writes)
            th.start()
            self.assertFalse(done.wait(0.5), "the newer holder must wait for the older one's transaction")
            older.commit()  # the older holder commits what it had, under token 1
            th.join(30)
            self.assertTrue(done.is_set())
            with self.assertRaises(StaleToken):
                self.write(older, 1, "late")
        finally:
            older.close()
            newer.close()
        self.assertEqual(self.rows(), ["first", "newer"])

    def test_a_database_without_the_fence(self):
        bare = self.pg.connect(BARE_PG_URL)
        try:
            with self.assertRaises(FenceNotInstalled):
                with bare, bare.cursor() as cur:
                    fence(cur, self.task, 1)
        finally:
            bare.close()


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args):
        pass


class Middleware(unittest.TestCase):
    def setUp(self):
        need(self, LEASEHOLD_TEST_FENCE_SQLITE_PATH=SQLITE_PATH)
        self.seen = []
        self.errors = []

        def app(environ, start_response):
            self.seen.append(environ["leasehold.fence"])
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"written"]

        self.app = FenceMiddleware(app, lambda: sqlite3.connect(SQLITE_PATH, timeout=30), on_error=self.errors.append)
        self.server = make_server("127.0.0.1", 0, self.serve, handler_class=_Quiet)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.base = "http://127.0.0.1:%d/" % self.server.server_port
        self.task = "py-fence-http/" + os.urandom(4).hex()

    def serve(self, environ, start_response):
        return self.current(environ, start_response)

    current = None

    def tearDown(self):
        self.server.shutdown()
        self.server.server_close()

    def send(self, headers, app=None):
        self.current = app or self.app
        req = urllib.request.Request(self.base, data=b"x", headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, r.headers.get("Content-Type"), r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers.get("Content-Type"), e.read()

    def test_tokens_through_the_middleware(self):
        status, _, body = self.send(fence_headers(self.task, 7))
        self.assertEqual((status, body), (200, b"written"))
        self.assertEqual(self.seen, [(self.task, 7)])
        status, ctype, body = self.send(fence_headers(self.task, 6))
        self.assertEqual(status, 409)
        self.assertEqual(ctype, "application/problem+json")
        doc = json.loads(body)
        self.assertEqual((doc["type"], doc["task"], doc["token"], doc["highest_token"]), (PROBLEM_STALE_TOKEN, self.task, 6, 7))
        self.assertEqual(len(self.seen), 1, "the application must not run for a stale token")

    def test_bad_headers(self):
        cases = [
            ({}, 428, PROBLEM_FENCE_REQUIRED, "Leasehold-Task and Leasehold-Token headers are required"),
            ({HEADER_TASK: self.task}, 428, PROBLEM_FENCE_REQUIRED, "Leasehold-Token header is required"),
            ({HEADER_TASK: self.task, HEADER_TOKEN: "0"}, 400, PROBLEM_INVALID_FENCE, "Leasehold-Token header must be a decimal integer of at least 1"),
            ({HEADER_TASK: self.task, HEADER_TOKEN: "+3"}, 400, PROBLEM_INVALID_FENCE, "at least 1"),
            ({HEADER_TASK: self.task, HEADER_TOKEN: "99999999999999999999"}, 400, PROBLEM_INVALID_FENCE, "at least 1"),
            ({HEADER_TASK: " ", HEADER_TOKEN: "3"}, 400, PROBLEM_INVALID_FENCE, "Leasehold-Task header must not be empty"),
        ]
        for headers, status, typ, detail in cases:
            with self.subTest(headers=headers):
                got, _, body = self.send(headers)
                doc = json.loads(body)
                self.assertEqual((got, doc["type"], doc["status"]), (status, typ, status))
                self.assertIn(detail, doc["detail"])
        self.assertEqual(self.seen, [])

    def test_a_database_that_fails_is_503_and_says_nothing_of_it(self):
        def broken():
            raise sqlite3.OperationalError("unable to open database file /secret/path")
        with tempfile.TemporaryDirectory() as d:
            bare = FenceMiddleware(lambda e, s: [b""], lambda: sqlite3.connect(os.path.join(d, "bare.db")),
                                   on_error=self.errors.append)
            for app in (FenceMiddleware(lambda e, s: [b""], broken, on_error=self.errors.append), bare):
                status, _, body = self.send(fence_headers(self.task, 1), app=app)
                doc = json.loads(body)
                self.assertEqual((status, doc["type"]), (503, PROBLEM_FENCE_UNAVAILABLE))
                self.assertNotIn("secret", body.decode())
        self.assertIsInstance(self.errors[0], sqlite3.OperationalError)
        self.assertIsInstance(self.errors[1], FenceNotInstalled)


if __name__ == "__main__":
    unittest.main()
