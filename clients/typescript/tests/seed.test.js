// The wallet seed's monitor-lease API (seed.js), case by case as the seed documents it,
// against a real sidecar (see env.js).
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  LeaseholdClient,
  LeasedMonitorTask,
  LeaseUnavailableError,
  tryClaimLease,
  renewLease,
  releaseLease,
} from "../index.js";
import { url, token, downUrl, waitFor } from "./env.js";

const client = new LeaseholdClient({ baseUrl: url, token });
const down = new LeaseholdClient({ baseUrl: downUrl });
let n = 0;
/** A task name of this run's own. @param {string} what */
const task = (what) => `ts-seed/${what}/${process.pid}-${n++}`;
const sleep = (/** @type {number} */ ms) => new Promise((r) => setTimeout(r, ms));

/**
 * Runs fn with console.log captured; resolves fn's value and the lines logged.
 * @template T @param {() => Promise<T>} fn
 * @returns {Promise<{value?: T, error?: unknown, lines: string[]}>}
 */
async function logged(fn) {
  const lines = /** @type {string[]} */ ([]);
  const log = console.log;
  console.log = (...args) => lines.push(args.join(" "));
  try {
    return { value: await fn(), lines };
  } catch (error) {
    return { error, lines };
  } finally {
    console.log = log;
  }
}

/**
 * A fetch that records each request's verb (the path's last segment) with when it started
 * and when its answer was read.
 */
function recordingFetch() {
  /** @type {{verb: string, start: number, end: number}[]} */
  const calls = [];
  let clock = 0;
  /** @type {typeof fetch} */
  const f = async (input, init) => {
    const u = new URL(String(input));
    const call = { verb: u.pathname.split("/").pop() ?? "", start: clock++, end: -1 };
    calls.push(call);
    const res = await fetch(input, init);
    const body = await res.text();
    call.end = clock++;
    return new Response(body, { status: res.status, headers: res.headers });
  };
  return { calls, fetch: f };
}

test("tryClaimLease: a free task is acquired, a fresh row with renewCount 0", async () => {
  const name = task("claim");
  const before = Date.now();
  const r = await tryClaimLease(client, { taskName: name, ownerId: "m1", ttlMs: 30_000, note: "first" });
  assert.equal(r.acquired, true);
  assert.ok(r.lease);
  assert.equal(r.lease.taskName, name);
  assert.equal(r.lease.ownerId, "m1");
  assert.equal(r.lease.renewCount, 0);
  assert.equal(r.lease.note, "first");
  assert.ok(r.lease.expiresAt instanceof Date);
  // Within the ttl of the claim, give or take the clocks of this process and the store.
  assert.ok(r.lease.expiresAt.getTime() > before + 25_000 && r.lease.expiresAt.getTime() < Date.now() + 35_000, String(r.lease.expiresAt));
  assert.ok(r.lease.token > 0);
});

test("tryClaimLease: the same owner takes its own live lease again, renewCount + 1, same token", async () => {
  const name = task("reclaim");
  const a = await tryClaimLease(client, { taskName: name, ownerId: "m1", ttlMs: 30_000 });
  const b = await tryClaimLease(client, { taskName: name, ownerId: "m1", ttlMs: 30_000 });
  assert.equal(b.acquired, true);
  assert.equal(b.lease?.renewCount, 1);
  assert.equal(b.lease?.token, a.lease?.token);
});

test("tryClaimLease: another owner's live lease is not acquired; once expired, it is taken over", async () => {
  const name = task("takeover");
  const a = await tryClaimLease(client, { taskName: name, ownerId: "m1", ttlMs: 300 });
  assert.equal(a.acquired, true);
  assert.deepEqual(await tryClaimLease(client, { taskName: name, ownerId: "m2", ttlMs: 30_000 }), { acquired: false });
  await sleep(400);
  const b = await tryClaimLease(client, { taskName: name, ownerId: "m2", ttlMs: 30_000 });
  assert.equal(b.acquired, true);
  assert.equal(b.lease?.ownerId, "m2");
  assert.equal(b.lease?.renewCount, 0);
  assert.ok((b.lease?.token ?? 0) > (a.lease?.token ?? 0), "a new holder gets a higher token");
});

test("renewLease: the owner extends its lease and may replace its note", async () => {
  const name = task("renew");
  const a = await tryClaimLease(client, { taskName: name, ownerId: "m1", ttlMs: 1000, note: "claimed" });
  const r = await renewLease(client, { taskName: name, ownerId: "m1", ttlMs: 60_000, note: "renewed" });
  assert.equal(r.acquired, true);
  assert.equal(r.lease?.renewCount, 1);
  assert.equal(r.lease?.note, "renewed");
  assert.ok((r.lease?.expiresAt.getTime() ?? 0) > (a.lease?.expiresAt.getTime() ?? 0) + 50_000);
  assert.equal((await client.get(name))?.note, "renewed", "the note is kept on the lease");
  const kept = await renewLease(client, { taskName: name, ownerId: "m1", ttlMs: 60_000 });
  assert.equal(kept.lease?.note, "renewed", "a renewal without a note keeps the lease's");
});

test("renewLease fails (acquired: false) with no row, another owner's row, or an expired one", async () => {
  const name = task("renew-fail");
  assert.deepEqual(await renewLease(client, { taskName: name, ownerId: "m1", ttlMs: 1000 }), { acquired: false });
  await tryClaimLease(client, { taskName: name, ownerId: "m1", ttlMs: 200 });
  assert.deepEqual(await renewLease(client, { taskName: name, ownerId: "m2", ttlMs: 1000 }), { acquired: false });
  await sleep(300);
  assert.deepEqual(await renewLease(client, { taskName: name, ownerId: "m1", ttlMs: 1000 }), { acquired: false });
});

test("releaseLease: a no-op for another owner; the owner's release frees the task with no inherited renewCount", async () => {
  const name = task("release");
  await tryClaimLease(client, { taskName: name, ownerId: "m1", ttlMs: 30_000 });
  await renewLease(client, { taskName: name, ownerId: "m1", ttlMs: 30_000 });
  assert.equal(await releaseLease(client, { taskName: name, ownerId: "m2" }), false);
  assert.equal((await client.get(name))?.owner, "m1", "another owner's release changes nothing");
  assert.equal(await releaseLease(client, { taskName: name, ownerId: "m1" }), true);
  assert.equal(await releaseLease(client, { taskName: name, ownerId: "m1" }), false, "released twice: a no-op");
  const again = await tryClaimLease(client, { taskName: name, ownerId: "m2", ttlMs: 30_000 });
  assert.equal(again.lease?.renewCount, 0);
});

test("the seed functions: a store that cannot answer is LeaseUnavailableError, never acquired: false", async () => {
  const name = task("down");
  await assert.rejects(tryClaimLease(down, { taskName: name, ownerId: "m1", ttlMs: 1000 }), LeaseUnavailableError);
  await assert.rejects(renewLease(down, { taskName: name, ownerId: "m1", ttlMs: 1000 }), LeaseUnavailableError);
  await assert.rejects(releaseLease(down, { taskName: name, ownerId: "m1" }), LeaseUnavailableError);
});

test("the seed functions name a wrong argument", async () => {
  await assert.rejects(tryClaimLease(/** @type {any} */ ({}), { taskName: "x", ownerId: "m", ttlMs: 1000 }), /LeaseholdClient/);
  await assert.rejects(tryClaimLease(client, { taskName: "x", ownerId: "m", ttlMs: 1000 }, /** @type {any} */ ("now")), /now/);
  await assert.rejects(tryClaimLease(client, { taskName: task("bad"), ownerId: "m", ttlMs: 5 }), (err) => err instanceof Error && /ttl_ms/.test(err.message));
});

test("LeasedMonitorTask.run: runs body holding the lease, resolves {ran: true}, releases it, and logs", async () => {
  const name = task("run");
  const helper = new LeasedMonitorTask(client);
  let holderInBody;
  const { value, lines } = await logged(() =>
    helper.run(name, "monitor-a", 30_000, async () => {
      holderInBody = (await client.get(name))?.owner;
      const rival = await tryClaimLease(client, { taskName: name, ownerId: "monitor-b", ttlMs: 30_000 });
      assert.equal(rival.acquired, false, "nobody else gets the task while body runs");
    }),
  );
  assert.deepEqual(value, { ran: true });
  assert.equal(holderInBody, "monitor-a");
  assert.equal(await client.get(name), null, "released when run resolves");
  assert.ok(lines.some((l) => l.includes(name) && l.includes("acquired")), lines.join("\n"));
  assert.ok(lines.some((l) => l.includes(name) && l.includes("released")), lines.join("\n"));
});

test("LeasedMonitorTask.run: another owner's live lease resolves {ran: false}, body never called", async () => {
  const name = task("run-held");
  await tryClaimLease(client, { taskName: name, ownerId: "monitor-b", ttlMs: 30_000 });
  let called = false;
  const { value, lines } = await logged(() =>
    new LeasedMonitorTask(client).run(name, "monitor-a", 30_000, async () => {
      called = true;
    }),
  );
  assert.deepEqual(value, { ran: false });
  assert.equal(called, false);
  assert.equal((await client.get(name))?.owner, "monitor-b");
  assert.ok(lines.some((l) => l.includes(name) && l.includes("monitor-b")), lines.join("\n"));
});

test("LeasedMonitorTask.run: body's error is re-thrown after the cleanup", async () => {
  const name = task("run-throws");
  const boom = new Error("boom");
  const { error } = await logged(() =>
    new LeasedMonitorTask(client).run(name, "monitor-a", 30_000, async () => {
      throw boom;
    }),
  );
  assert.equal(error, boom);
  assert.equal(await client.get(name), null, "released before the error came out");
});

test("LeasedMonitorTask.run: renewal by setInterval at ttlMs × 0.4 keeps the lease past its ttl", async () => {
  const name = task("run-renews");
  const delays = /** @type {number[]} */ ([]);
  const real = globalThis.setInterval;
  globalThis.setInterval = /** @type {any} */ ((/** @type {() => void} */ fn, /** @type {number} */ ms) => {
    delays.push(ms);
    return real(fn, ms);
  });
  let renewCount = 0;
  try {
    await logged(() =>
      new LeasedMonitorTask(client).run(name, "monitor-a", 500, async () => {
        // Three ttls: without renewals the lease would expire and the rival get it.
        for (let i = 0; i < 15; i++) {
          await sleep(100);
          const rival = await tryClaimLease(client, { taskName: name, ownerId: "monitor-b", ttlMs: 30_000 });
          assert.equal(rival.acquired, false, `the rival got the task ${(i + 1) * 100} ms in`);
        }
        renewCount = (await client.get(name))?.renewCount ?? 0;
      }),
    );
  } finally {
    globalThis.setInterval = real;
  }
  assert.deepEqual(delays, [200]);
  assert.ok(renewCount >= 1, `renewCount ${renewCount}`);
});

test("LeasedMonitorTask.run: renewals are stopped, none in flight, before the release is sent", async () => {
  const rec = recordingFetch();
  const c = new LeaseholdClient({ baseUrl: url, token, fetch: rec.fetch });
  for (let round = 0; round < 5; round++) {
    rec.calls.length = 0;
    const name = task("run-order");
    // A body that ends while a renewal may well be in flight (every 40 ms).
    await logged(() => new LeasedMonitorTask(c).run(name, "monitor-a", 100, () => sleep(90 + round * 7)));
    const release = rec.calls.findIndex((x) => x.verb === "release");
    assert.ok(release > 0, JSON.stringify(rec.calls));
    const start = rec.calls[release].start;
    for (const x of rec.calls.filter((x) => x.verb === "renew")) {
      assert.ok(x.end >= 0 && x.end < start, `a renewal answered at ${x.end}, the release sent at ${start}: ${JSON.stringify(rec.calls)}`);
    }
    assert.equal(rec.calls.filter((x) => x.verb === "release").length, 1);
  }
});

test("LeasedMonitorTask.run: a lease lost mid-body is logged, renewals stop, and body's signal aborts", async () => {
  const name = task("run-lost");
  const rec = recordingFetch();
  const c = new LeaseholdClient({ baseUrl: url, token, fetch: rec.fetch });
  const { value, lines } = await logged(() =>
    new LeasedMonitorTask(c).run(name, "monitor-a", 500, async (signal) => {
      const l = await client.get(name);
      // Out of band: the lease is released behind the helper's back.
      await client.release(name, { owner: "monitor-a", token: l?.token });
      await waitFor(() => signal.aborted, "the body's signal to abort");
      const renewals = rec.calls.filter((x) => x.verb === "renew").length;
      await sleep(500);
      assert.equal(rec.calls.filter((x) => x.verb === "renew").length, renewals, "no renewal after the loss");
    }),
  );
  assert.deepEqual(value, { ran: true });
  assert.ok(lines.some((l) => l.includes(name) && l.includes("lost")), lines.join("\n"));
});

test("LeasedMonitorTask takes client options, and a store that cannot answer throws LeaseUnavailableError", async () => {
  const name = task("run-options");
  assert.deepEqual(await logged(() => new LeasedMonitorTask({ baseUrl: url, token }).run(name, "monitor-a", 1000, async () => {})).then((r) => r.value), { ran: true });
  let called = false;
  const { error } = await logged(() =>
    new LeasedMonitorTask({ baseUrl: downUrl }).run(name, "monitor-a", 1000, async () => {
      called = true;
    }),
  );
  assert.ok(error instanceof LeaseUnavailableError, String(error));
  assert.equal(called, false);
});

test("LeasedMonitorTask.run names a wrong argument, and client.run called the seed's way points to it", async () => {
  const helper = new LeasedMonitorTask(client);
  await assert.rejects(helper.run("", "m", 1000, async () => {}), /taskName/);
  await assert.rejects(helper.run("t", "", 1000, async () => {}), /ownerId/);
  await assert.rejects(helper.run("t", "m", 1.5, async () => {}), /ttlMs/);
  await assert.rejects(helper.run("t", "m", 1000, /** @type {any} */ (undefined)), /body/);
  let called = false;
  await assert.rejects(
    client.run("t", /** @type {any} */ ("owner"), /** @type {any} */ (30_000), /** @type {any} */ (async () => (called = true))),
    (err) => err instanceof TypeError && /LeasedMonitorTask/.test(err.message),
  );
  assert.equal(called, false);
});
