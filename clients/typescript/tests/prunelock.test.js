// The observability console's prune-lock seam (TelescopePruneLock), its contract point by
// point, with leasehold behind it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { LeaseholdClient, leaseholdPruneLock, PRUNE_LOCK_KEY, MAX_TTL_MS, MIN_TTL_MS } from "../index.js";
import { url, token, downUrl, closedUrl, waitFor, cappedTask, cappedMaxTtlMs } from "./env.js";

const client = new LeaseholdClient({ baseUrl: url, token });
const lock = leaseholdPruneLock(client);

test("the key is the pruner's", () => {
  assert.equal(PRUNE_LOCK_KEY, "telescope:prune");
});

test("1. acquire never throws: a broken mechanism is unavailable", async () => {
  const cases = [
    ["closed port", leaseholdPruneLock(new LeaseholdClient({ baseUrl: await closedUrl() }))],
    ["store down", leaseholdPruneLock(new LeaseholdClient({ baseUrl: downUrl }))],
    ["wrong token", leaseholdPruneLock(new LeaseholdClient({ baseUrl: url, token: "wrong" }))],
  ];
  for (const [name, l] of cases) {
    const r = await l.acquire({ key: PRUNE_LOCK_KEY, owner: "pod-a#1", ttlMs: 30_000 });
    assert.equal(r.acquired, false, name);
    if (!r.acquired) {
      assert.equal(r.reason, "unavailable", name);
      assert.ok(r.detail, `${name}: a detail for the log line`);
    }
  }
  // A request leasehold refuses (no ttl at all, an empty key, an owner it refuses) is no
  // "held" either.
  for (const req of [
    { key: "ts-prune/bad", owner: "pod-a#1", ttlMs: Number.NaN },
    { key: "", owner: "pod-a#1", ttlMs: 30_000 },
    { key: "ts-prune/bad", owner: "", ttlMs: 30_000 },
  ]) {
    const r = await lock.acquire(req);
    assert.equal(r.acquired, false, JSON.stringify(req));
    if (!r.acquired) {
      assert.equal(r.reason, "unavailable", JSON.stringify(req));
      assert.ok(r.detail, `${JSON.stringify(req)}: a detail for the log line`);
    }
  }
});

test("2. at most one of many concurrent callers acquires; the rest are held", async () => {
  const key = "ts-prune/atomic";
  const results = await Promise.all(
    Array.from({ length: 16 }, (_, i) => lock.acquire({ key, owner: `pod-${i}#1`, ttlMs: 30_000 })),
  );
  const won = results.filter((r) => r.acquired);
  assert.equal(won.length, 1, JSON.stringify(results));
  for (const r of results) if (!r.acquired) assert.equal(r.reason, "held");
  const w = won[0];
  if (!w.acquired) return;
  assert.equal(w.lease.key, key);
  assert.ok(w.lease.expiresAtMs > Date.now() - 60_000 && w.lease.expiresAtMs < Date.now() + 120_000, `expiresAtMs ${w.lease.expiresAtMs}`);
  await w.lease.release();
});

test("3. a lease nobody releases expires on its own", async () => {
  const key = "ts-prune/expire";
  const first = await lock.acquire({ key, owner: "pod-dead#1", ttlMs: 200 });
  assert.equal(first.acquired, true);
  /** @type {any} */
  let second;
  await waitFor(async () => {
    second = await lock.acquire({ key, owner: "pod-b#1", ttlMs: 30_000 });
    if (!second.acquired) assert.equal(second.reason, "held");
    return second.acquired;
  }, "pod-b to get the abandoned lock");
  assert.equal(second.lease.owner, "pod-b#1");
  if (first.acquired) assert.ok(second.lease.token > first.lease.token, "a new fencing token");
  await second.lease.release();
});

test("4. the same owner re-acquiring while it holds the lease succeeds", async () => {
  const key = "ts-prune/refresh";
  const a = await lock.acquire({ key, owner: "pod-a#1", ttlMs: 30_000 });
  const again = await lock.acquire({ key, owner: "pod-a#1", ttlMs: 30_000 });
  assert.equal(a.acquired, true);
  assert.equal(again.acquired, true);
  const other = await lock.acquire({ key, owner: "pod-b#1", ttlMs: 30_000 });
  assert.equal(other.acquired, false);
  if (!other.acquired) assert.equal(other.reason, "held");
  if (again.acquired) await again.lease.release();
});

test("5. release is idempotent and frees the lock", async () => {
  const key = "ts-prune/release";
  const a = await lock.acquire({ key, owner: "pod-a#1", ttlMs: 30_000 });
  assert.equal(a.acquired, true);
  if (!a.acquired) return;
  await a.lease.release();
  await a.lease.release();
  assert.equal(await client.get(key), null);
  const b = await lock.acquire({ key, owner: "pod-b#1", ttlMs: 30_000 });
  assert.equal(b.acquired, true);
  await a.lease.release(); // after another owner got it: still nothing to do
  assert.equal((await client.get(key))?.owner, "pod-b#1");
  if (b.acquired) await b.lease.release();
});

test("5. release never throws, even when the sidecar is gone", async () => {
  let broken = false;
  /** @type {typeof fetch} */
  const flaky = (input, init) => (broken ? Promise.reject(new TypeError("fetch failed")) : fetch(input, init));
  const l = leaseholdPruneLock(new LeaseholdClient({ baseUrl: url, token, fetch: flaky }));
  const key = "ts-prune/gone";
  const a = await l.acquire({ key, owner: "pod-a#1", ttlMs: 30_000 });
  assert.equal(a.acquired, true);
  if (!a.acquired) return;
  broken = true;
  await a.lease.release();
  await a.lease.release();
  assert.equal((await client.get(key))?.owner, "pod-a#1", "the ttl is the backstop");
  await client.release(key, { owner: "pod-a#1" });
});

test("5. release does not free a lease since granted to another owner", async () => {
  const key = "ts-prune/regranted";
  const a = await lock.acquire({ key, owner: "pod-a#1", ttlMs: 200 });
  assert.equal(a.acquired, true);
  if (!a.acquired) return;
  /** @type {any} */
  let b;
  await waitFor(async () => {
    b = await lock.acquire({ key, owner: "pod-b#1", ttlMs: 30_000 });
    return b.acquired;
  }, "pod-b to get the lock after pod-a's expired");
  await a.lease.release();
  const now = await client.get(key);
  assert.equal(now?.owner, "pod-b#1");
  assert.equal(now?.token, b.lease.token);
  await b.lease.release();
});

test("7. acquire does not wait for a held lock", async () => {
  const key = "ts-prune/nowait";
  const a = await lock.acquire({ key, owner: "pod-a#1", ttlMs: 60_000 });
  assert.equal(a.acquired, true);
  // Held answers at once: the holder's lease outlives this test by far, so a waiting
  // acquire could only end in the test's timeout.
  const b = await lock.acquire({ key, owner: "pod-b#1", ttlMs: 60_000 });
  assert.equal(b.acquired, false);
  if (!b.acquired) assert.equal(b.reason, "held");
  if (a.acquired) await a.lease.release();
});

const HOUR = 3_600_000;

/**
 * Asserts that expiresAtMs is ttlMs from now, give or take the time a request takes on a busy
 * machine (the store's clock and Date.now() are this machine's one clock).
 * @param {number} expiresAtMs
 * @param {number} ttlMs
 */
function expiresIn(expiresAtMs, ttlMs) {
  const slack = 60_000;
  const from = Date.now() + ttlMs - slack;
  const to = Date.now() + ttlMs + slack;
  assert.ok(expiresAtMs > from && expiresAtMs < to, `expiresAtMs ${new Date(expiresAtMs).toISOString()}: want ${ttlMs} ms from now`);
}

test("3. the ttls a pruner asks for are clamped into leasehold's range: a daily prune's 72 h is 24 h", async () => {
  // The console's pruner asks for three prune intervals: 72 h for a daily prune.
  const key = "ts-prune/daily";
  const { lock: l, claims } = recordingLock();
  const a = await l.acquire({ key, owner: "pod-a#1", ttlMs: 72 * HOUR });
  assert.equal(a.acquired, true, JSON.stringify(a));
  if (!a.acquired) return;
  assert.equal(MAX_TTL_MS, 24 * HOUR);
  assert.equal(claims[0].sent.ttl_ms, MAX_TTL_MS);
  assert.equal(a.lease.expiresAtMs - Date.parse(claims[0].answer.lease.acquired_at), MAX_TTL_MS);
  expiresIn(a.lease.expiresAtMs, MAX_TTL_MS);
  const now = await client.get(key);
  assert.equal(now?.ttlMs, MAX_TTL_MS);
  assert.equal(now?.token, a.lease.token);
  // It is a lease like any other: held for others, refreshed by its owner.
  const b = await lock.acquire({ key, owner: "pod-b#1", ttlMs: 72 * HOUR });
  assert.equal(b.acquired, false);
  if (!b.acquired) assert.equal(b.reason, "held");
  const again = await lock.acquire({ key, owner: "pod-a#1", ttlMs: Number.POSITIVE_INFINITY });
  assert.equal(again.acquired, true);
  if (again.acquired) assert.equal(again.lease.token, a.lease.token);
  await a.lease.release();
  assert.equal(await client.get(key), null);
});

/**
 * A prune lock whose client records every claim it sends and the sidecar's answer.
 * @returns {{lock: import("../index.js").PruneLock, claims: {sent: any, answer: any}[]}}
 */
function recordingLock() {
  /** @type {{sent: any, answer: any}[]} */
  const claims = [];
  /** @type {typeof fetch} */
  const recording = async (input, init) => {
    const res = await fetch(input, init);
    if (String(input).endsWith("/claim")) claims.push({ sent: JSON.parse(String(init?.body)), answer: await res.clone().json() });
    return res;
  };
  return { lock: leaseholdPruneLock(new LeaseholdClient({ baseUrl: url, token, fetch: recording })), claims };
}

test("3. a 30 ms ttl is leasehold's 100 ms, and the lease expires on its own", async () => {
  const key = "ts-prune/30ms";
  const { lock: l, claims } = recordingLock();
  const a = await l.acquire({ key, owner: "pod-dead#1", ttlMs: 30 });
  assert.equal(a.acquired, true, JSON.stringify(a));
  if (!a.acquired) return;
  assert.equal(MIN_TTL_MS, 100);
  assert.equal(claims.length, 1);
  assert.equal(claims[0].sent.ttl_ms, MIN_TTL_MS);
  const granted = claims[0].answer.lease;
  assert.equal(granted.ttl_ms, MIN_TTL_MS);
  assert.equal(a.lease.expiresAtMs - Date.parse(granted.acquired_at), MIN_TTL_MS);
  /** @type {any} */
  let b;
  await waitFor(async () => {
    b = await l.acquire({ key, owner: "pod-b#1", ttlMs: 30 });
    if (!b.acquired) assert.equal(b.reason, "held");
    return b.acquired;
  }, "pod-b to get the lock pod-dead left after 100 ms");
  assert.ok(b.lease.token > a.lease.token, "a new fencing token");
  await b.lease.release();
});

test("3. a task's declared max_ttl bounds the clamp: asked once, then remembered", async () => {
  let requests = 0;
  /** @type {typeof fetch} */
  const counting = (input, init) => {
    requests++;
    return fetch(input, init);
  };
  const l = leaseholdPruneLock(new LeaseholdClient({ baseUrl: url, token, fetch: counting }));
  const a = await l.acquire({ key: cappedTask, owner: "pod-a#1", ttlMs: 72 * HOUR });
  assert.equal(a.acquired, true, JSON.stringify(a));
  if (!a.acquired) return;
  expiresIn(a.lease.expiresAtMs, cappedMaxTtlMs);
  assert.equal((await client.get(cappedTask))?.ttlMs, cappedMaxTtlMs);
  // The claim refused for its ttl, the declaration, the claim within it.
  assert.equal(requests, 3);
  await a.lease.release();
  requests = 0;
  const again = await l.acquire({ key: cappedTask, owner: "pod-a#1", ttlMs: 72 * HOUR });
  assert.equal(again.acquired, true, JSON.stringify(again));
  assert.equal(requests, 1, "the max_ttl learnt is used at once");
  if (again.acquired) await again.lease.release();
  // Below the max, the ttl asked for is granted as it is.
  const short = await l.acquire({ key: cappedTask, owner: "pod-a#1", ttlMs: 1_000 });
  assert.equal(short.acquired, true);
  assert.equal((await client.get(cappedTask))?.ttlMs, 1_000);
  if (short.acquired) await short.lease.release();
});
