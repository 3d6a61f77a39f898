// Fencing at the resource (fence.js): fence() inside a job's own PostgreSQL transactions
// (through npm's pg, on a database `leasehold fence install` fenced), with tokens from real
// leases, and fenceMiddleware in front of a node:http handler (see env.js).
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import pg from "pg";
import {
  LeaseholdClient,
  fence,
  fenceHeaders,
  fenceMiddleware,
  requestFence,
  StaleTokenError,
  FenceNotInstalledError,
  STALE_SQLSTATE,
  PROBLEM_STALE_TOKEN,
  PROBLEM_FENCE_REQUIRED,
  PROBLEM_INVALID_FENCE,
  PROBLEM_FENCE_UNAVAILABLE,
} from "../index.js";
import { url, token, fencePgUrl, barePgUrl, waitFor } from "./env.js";

const client = new LeaseholdClient({ baseUrl: url, token });
const pool = new pg.Pool({ connectionString: fencePgUrl, max: 6 });
const bare = new pg.Pool({ connectionString: barePgUrl, max: 2 });
after(() => Promise.all([pool.end(), bare.end()]));
await pool.query("CREATE TABLE IF NOT EXISTS ts_writes (id bigserial PRIMARY KEY, task text NOT NULL, token bigint NOT NULL, v text NOT NULL)");

let n = 0;
/** @param {string} what */
const task = (what) => `ts-fence/${what}/${process.pid}-${n++}`;

/**
 * Two successive holders of a fresh task: the first released, the second holding.
 * @param {string} name
 */
async function twoHolders(name) {
  const a = await client.claim(name, { owner: "job-a", ttlMs: 30_000 });
  assert.equal(a.kind, "acquired");
  if (a.kind !== "acquired") throw new Error("unreachable");
  await client.release(name, { owner: "job-a", token: a.lease.token });
  const b = await client.claim(name, { owner: "job-b", ttlMs: 30_000 });
  assert.equal(b.kind, "acquired");
  if (b.kind !== "acquired") throw new Error("unreachable");
  assert.ok(b.lease.token > a.lease.token);
  return { older: a.lease.token, newer: b.lease.token };
}

/**
 * Writes v in a transaction of its own, fenced; resolves "ok" or rejects with fence's error.
 * @param {pg.PoolClient} c @param {string} name @param {number} tok @param {string} v
 */
async function write(c, name, tok, v) {
  await c.query("BEGIN");
  try {
    await fence((sql, params) => c.query(sql, params), name, tok);
    await c.query("INSERT INTO ts_writes (task, token, v) VALUES ($1, $2, $3)", [name, tok, v]);
    await c.query("COMMIT");
    return "ok";
  } catch (err) {
    await c.query("ROLLBACK");
    throw err;
  }
}

/** Resolves once a session of the fenced database waits on a lock (the fence's row). */
function aWaiter() {
  return waitFor(async () => {
    const r = await pool.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'");
    return r.rows[0].n > 0;
  }, "a transaction to wait on the fence's row lock");
}

/** @param {string} name */
async function rows(name) {
  const r = await pool.query("SELECT token, v FROM ts_writes WHERE task = $1 ORDER BY id", [name]);
  return r.rows.map((x) => `${x.token}:${x.v}`);
}

test("fence: a newer holder's write is recorded, an equal token accepted, the older holder refused and rolled back", async () => {
  const name = task("sequential");
  const { older, newer } = await twoHolders(name);
  const c = await pool.connect();
  try {
    assert.equal(await write(c, name, older, "a1"), "ok", "the first token seen is recorded");
    assert.equal(await write(c, name, newer, "b1"), "ok");
    assert.equal(await write(c, name, newer, "b2"), "ok", "an equal token is accepted");
    await assert.rejects(write(c, name, older, "a2"), (err) => {
      assert.ok(err instanceof StaleTokenError, String(err));
      assert.equal(err.task, name);
      assert.equal(err.token, older);
      assert.equal(err.highest, newer);
      assert.equal(/** @type {any} */ (err.cause).code, STALE_SQLSTATE);
      return true;
    });
  } finally {
    c.release();
  }
  assert.deepEqual(await rows(name), [`${older}:a1`, `${newer}:b1`, `${newer}:b2`]);
});

test("fence: concurrent transactions of two holders order by the fence's row lock", async () => {
  // The older holder's transaction fences first and is still open: the newer one's fence
  // waits for it, then records its token; the older holder's next write is refused.
  const name = task("older-first");
  const { older, newer } = await twoHolders(name);
  const [c1, c2] = [await pool.connect(), await pool.connect()];
  try {
    await c1.query("BEGIN");
    await fence((s, p) => c1.query(s, p), name, older);
    await c1.query("INSERT INTO ts_writes (task, token, v) VALUES ($1, $2, 'a1')", [name, older]);
    const second = write(c2, name, newer, "b1");
    await aWaiter();
    await c1.query("COMMIT");
    assert.equal(await second, "ok");
    await assert.rejects(write(c1, name, older, "a2"), StaleTokenError);
    assert.deepEqual(await rows(name), [`${older}:a1`, `${newer}:b1`]);

    // The newer holder fences first, uncommitted: the older one's fence waits, and is
    // refused once the newer commits; its write never lands.
    const other = task("newer-first");
    const t = await twoHolders(other);
    await c2.query("BEGIN");
    await fence((s, p) => c2.query(s, p), other, t.newer);
    const late = write(c1, other, t.older, "a1").then(
      () => "committed",
      (err) => err,
    );
    await aWaiter();
    await c2.query("INSERT INTO ts_writes (task, token, v) VALUES ($1, $2, 'b1')", [other, t.newer]);
    await c2.query("COMMIT");
    const got = await late;
    assert.ok(got instanceof StaleTokenError, String(got));
    assert.deepEqual(await rows(other), [`${t.newer}:b1`]);
  } finally {
    c1.release();
    c2.release();
  }
});

test("fence: a database without the fence is FenceNotInstalledError, naming the cure", async () => {
  await assert.rejects(
    fence((s, p) => bare.query(s, p), task("bare"), 1),
    (err) => err instanceof FenceNotInstalledError && /leasehold fence install/.test(err.message),
  );
});

test("fence: a bad task or token is refused, naming it, before anything is sent", async () => {
  let sent = 0;
  const q = async () => {
    sent++;
  };
  await assert.rejects(fence(q, "", 1), /task/);
  for (const bad of [0, -1, 1.5, "3", Number.MAX_SAFE_INTEGER + 1, null]) {
    await assert.rejects(fence(q, "t", /** @type {any} */ (bad)), /token/, String(bad));
  }
  await assert.rejects(fence(q, "t", 1, { dialect: /** @type {any} */ ("mysql") }), /dialect/);
  await assert.rejects(fence(/** @type {any} */ ("pool"), "t", 1), /query/);
  assert.equal(sent, 0);
  assert.equal(await fence(q, "t", 7n), 7, "a bigint token is taken");
});

test("fence with dialect sqlite: its own statement, and SQLite's refusal read as StaleTokenError", async () => {
  // The driver is the caller's (Node 20 has no SQLite of its own); this seam stands for one
  // and answers as SQLite does: the guard trigger's RAISE, then the row.
  /** @type {[string, unknown[]][]} */
  const seen = [];
  /** @param {string} sql @param {unknown[]} params */
  const q = async (sql, params) => {
    seen.push([sql, params]);
    if (sql.startsWith("INSERT")) throw new Error("SQLITE_CONSTRAINT_TRIGGER: leasehold_fence: stale token");
    return [{ token: 9 }];
  };
  await assert.rejects(fence(q, "t", 4, { dialect: "sqlite" }), (err) => err instanceof StaleTokenError && err.highest === 9 && err.token === 4);
  assert.match(seen[0][0], /^INSERT INTO leasehold_fence \(task, token\) VALUES \(\?, \?\) ON CONFLICT \(task\) DO UPDATE/);
  assert.deepEqual(seen[0][1], ["t", 4]);
  assert.deepEqual(seen[1], ["SELECT token FROM leasehold_fence WHERE task = ?", ["t"]]);
  await assert.rejects(
    fence(async () => {
      throw new Error("SQLITE_ERROR: no such table: leasehold_fence");
    }, "t", 4, { dialect: "sqlite" }),
    FenceNotInstalledError,
  );
});

/**
 * Serves a fenced handler on 127.0.0.1; resolves its base URL, the handler's calls and the
 * errors onError got.
 * @param {pg.Pool} db
 */
async function fencedServer(db) {
  /** @type {{task: string, token: number}[]} */
  const calls = [];
  /** @type {unknown[]} */
  const errors = [];
  const srv = createServer(
    fenceMiddleware({ query: (s, p) => db.query(s, p), onError: (err) => errors.push(err) }, (req, res) => {
      const f = requestFence(req);
      if (f) calls.push(f);
      res.end("written");
    }),
  );
  await new Promise((r) => srv.listen(0, "127.0.0.1", () => r(undefined)));
  const addr = /** @type {import("node:net").AddressInfo} */ (srv.address());
  after(() => new Promise((r) => srv.close(() => r(undefined))));
  return { base: `http://127.0.0.1:${addr.port}`, calls, errors };
}

test("fenceMiddleware: a current token reaches the handler; a superseded one is a stale-token problem, the handler never run", async () => {
  const s = await fencedServer(pool);
  const name = task("http");
  const { older, newer } = await twoHolders(name);
  const ok = await fetch(s.base + "/write", { method: "POST", headers: fenceHeaders(name, newer) });
  assert.equal(ok.status, 200);
  assert.equal(await ok.text(), "written");
  assert.deepEqual(s.calls, [{ task: name, token: newer }]);

  const stale = await fetch(s.base + "/write", { method: "POST", headers: fenceHeaders(name, older) });
  assert.equal(stale.status, 409);
  assert.equal(stale.headers.get("content-type"), "application/problem+json");
  const doc = await stale.json();
  assert.equal(doc.type, PROBLEM_STALE_TOKEN);
  assert.equal(doc.task, name);
  assert.equal(doc.token, older);
  assert.equal(doc.highest_token, newer);
  assert.equal(s.calls.length, 1, "the handler did not run");
});

test("fenceMiddleware: missing and malformed headers are problems of their own; a store failure is 503 with its cause kept out", async () => {
  const s = await fencedServer(pool);
  /** @param {Record<string, string>} headers */
  const ask = async (headers) => {
    const r = await fetch(s.base + "/write", { method: "POST", headers });
    return { status: r.status, doc: await r.json() };
  };
  let r = await ask({});
  assert.equal(r.status, 428);
  assert.equal(r.doc.type, PROBLEM_FENCE_REQUIRED);
  assert.match(r.doc.detail, /Leasehold-Task and Leasehold-Token/);
  r = await ask({ "Leasehold-Task": "t" });
  assert.equal(r.status, 428);
  assert.match(r.doc.detail, /^Leasehold-Token header is required/);
  for (const bad of ["abc", "0", "-1", "1.0", "99999999999999999999"]) {
    r = await ask({ "Leasehold-Task": "t", "Leasehold-Token": bad });
    assert.equal(r.status, 400, bad);
    assert.equal(r.doc.type, PROBLEM_INVALID_FENCE);
    assert.match(r.doc.detail, /Leasehold-Token/);
  }
  r = await ask({ "Leasehold-Task": " ", "Leasehold-Token": "1" });
  assert.equal(r.status, 400);
  assert.match(r.doc.detail, /Leasehold-Task header must not be empty/);
  const twice = new Headers([["Leasehold-Task", "t"], ["Leasehold-Token", "1"], ["Leasehold-Token", "2"]]);
  const res = await fetch(s.base + "/write", { method: "POST", headers: twice });
  assert.equal(res.status, 400);
  assert.match((await res.json()).detail, /given once/);
  assert.equal(s.calls.length, 0);

  const b = await fencedServer(bare);
  const down = await fetch(b.base + "/write", { method: "POST", headers: fenceHeaders("t", 1) });
  assert.equal(down.status, 503);
  const doc = await down.json();
  assert.equal(doc.type, PROBLEM_FENCE_UNAVAILABLE);
  assert.equal(doc.detail, "the resource database has no fence installed");
  assert.equal(b.calls.length, 0);
  assert.ok(b.errors[0] instanceof FenceNotInstalledError);
});

test("fenceHeaders validates as fence does", () => {
  assert.deepEqual(fenceHeaders("job", 12), { "Leasehold-Task": "job", "Leasehold-Token": "12" });
  assert.throws(() => fenceHeaders("job", 0), /token/);
  assert.throws(() => fenceHeaders("", 1), /task/);
});
