// Minimum holds, run()'s scheduled-job mode (oncePerMs) and the run outcomes run() records,
// against a sidecar of this file's own over the suite's store (see env.js): its /metrics count
// only the runs made here, and the tests of a file run one at a time.
import { test } from "node:test";
import assert from "node:assert/strict";
import { LeaseholdClient, LeaseLostError } from "../index.js";
import { runsUrl, token, aborted, ask, releasedEvents, runsTotal, sleep } from "./env.js";

const client = new LeaseholdClient({ baseUrl: runsUrl, token });

/** @param {string} a @param {string} b the ms from RFC 3339 time a to b */
const between = (a, b) => Date.parse(b) - Date.parse(a);

/**
 * The change of leasehold_runs_total while body runs.
 * @param {() => Promise<void>} body
 */
async function runsCounted(body) {
  const before = await runsTotal(runsUrl);
  await body();
  const after = await runsTotal(runsUrl);
  return Object.fromEntries(Object.keys(after).map((k) => [k, after[k] - before[k]]));
}

test("a claim's minimum hold: the lease says its end, and the task rests after the release, for its owner too", async () => {
  const task = "ts/minhold/claim";
  const a = await client.claim(task, { owner: "ts-a", ttlMs: 30_000, minHoldMs: 60_000 });
  assert.equal(a.kind, "acquired");
  if (a.kind !== "acquired") return;
  const { lease } = a;
  assert.ok(lease.holdUntil, "the lease names the hold's end");
  assert.equal(between(lease.acquiredAt, lease.holdUntil), 60_000);

  const live = await client.claim(task, { owner: "ts-b" });
  assert.equal(live.kind, "held");
  if (live.kind !== "held") return;
  assert.equal(live.holder.owner, "ts-a");
  assert.equal(live.holder.resting, false, "a live lease is not resting");
  assert.equal(live.holder.acquiredAt, lease.acquiredAt);
  assert.equal(live.holder.holdUntil, lease.holdUntil);

  assert.deepEqual(await client.release(task, { owner: "ts-a", token: lease.token }), {
    kind: "released",
    released: true,
    holdUntil: lease.holdUntil,
  });
  assert.equal(await client.get(task), null, "no live lease once released");
  for (const owner of ["ts-b", "ts-a"]) {
    const r = await client.claim(task, { owner });
    assert.equal(r.kind, "held", `${owner}'s claim of a resting task`);
    if (r.kind !== "held") return;
    assert.equal(r.holder.owner, "ts-a");
    assert.equal(r.holder.resting, true);
    assert.equal(r.holder.acquiredAt, lease.acquiredAt);
    assert.equal(r.holder.holdUntil, lease.holdUntil);
    assert.equal(r.holder.expiresAt, lease.holdUntil, "a resting task is free at the hold's end");
    assert.ok(r.holder.ttlRemainingMs > 0 && r.holder.ttlRemainingMs <= 60_000, `ttlRemainingMs ${r.holder.ttlRemainingMs}`);
  }

  // Without a minimum hold nothing says one.
  const plain = await client.claim("ts/minhold/none", { owner: "ts-a", ttlMs: 30_000 });
  assert.equal(plain.kind, "acquired");
  if (plain.kind !== "acquired") return;
  assert.equal("holdUntil" in plain.lease, false);
  const rival = await client.claim("ts/minhold/none", { owner: "ts-b" });
  assert.equal(rival.kind === "held" && rival.holder.resting === false && !("holdUntil" in rival.holder), true);
  assert.deepEqual(await client.release("ts/minhold/none", { owner: "ts-a", token: plain.lease.token }), { kind: "released", released: true });
});

test("a keepalive stream's minimum hold outlasts the stream", async () => {
  const task = "ts/minhold/keepalive";
  const k = await client.keepalive(task, { owner: "ts-k", ttlMs: 1_000, minHoldMs: 60_000 });
  assert.equal(k.kind, "acquired");
  if (k.kind !== "acquired") return;
  const { holder } = k;
  const hold = holder.lease.holdUntil;
  assert.ok(hold);
  assert.equal(between(holder.lease.acquiredAt, hold), 60_000);
  await holder.release();
  assert.equal(await client.get(task), null);
  for (const owner of ["ts-other", "ts-k"]) {
    const again = await client.keepalive(task, { owner, ttlMs: 1_000 });
    assert.equal(again.kind, "held", `${owner}'s stream on a resting task`);
    if (again.kind !== "held") return;
    assert.equal(again.holder.owner, "ts-k");
    assert.equal(again.holder.resting, true);
    assert.equal(again.holder.holdUntil, hold);
  }
});

test("once per period: of two runs in a row the first runs, the second is skipped naming the first", async () => {
  const task = "ts/once/row";
  const period = 60_000;
  let calls = 0;
  /** @type {any} */
  let whileRunning;
  const first = await client.run(
    task,
    async (lease) => {
      calls++;
      // Another replica fires while this one runs.
      whileRunning = await client.run(task, () => calls++, { owner: "ts-replica-2", oncePerMs: period });
      return lease.owner;
    },
    { owner: "ts-replica-1", oncePerMs: period, ttlMs: 10_000 },
  );
  assert.equal(first.kind, "ran");
  if (first.kind !== "ran") return;
  assert.equal(first.value, "ts-replica-1");
  assert.equal(between(first.lease.acquiredAt, first.lease.holdUntil ?? ""), period / 2, "a minimum hold of half the period");

  assert.equal(whileRunning.kind, "skipped");
  assert.equal(whileRunning.runBy, "ts-replica-1");
  assert.equal(whileRunning.running, true, "the first run was still going");
  assert.equal(whileRunning.startedAt, first.lease.acquiredAt);
  assert.ok(between(whileRunning.startedAt, whileRunning.freeAt) > 0, `freeAt ${whileRunning.freeAt}`);

  for (const owner of ["ts-replica-2", "ts-replica-1"]) {
    const r = await client.run(task, () => calls++, { owner, oncePerMs: period });
    assert.equal(r.kind, "skipped", `${owner}'s run after the first`);
    if (r.kind !== "skipped") return;
    assert.equal(r.runBy, "ts-replica-1");
    assert.equal(r.running, false, "the first run is done");
    assert.equal(r.startedAt, first.lease.acquiredAt);
    assert.equal(r.freeAt, first.lease.holdUntil, "free when the hold ends");
    assert.equal(r.holder.resting, true);
    assert.match(r.detail, /ts-replica-1/);
  }
  assert.equal(calls, 1, "fn ran once");
});

test("once per period: five replicas firing within 300 ms, exactly one runs", async () => {
  for (let round = 0; round < 3; round++) {
    const task = `ts/once/fleet/${round}`;
    const ran = [];
    const results = await Promise.all(
      [1, 2, 3, 4, 5].map(async (i) => {
        await sleep(Math.random() * 300);
        return client.run(
          task,
          async (lease) => {
            ran.push(lease.owner);
            await sleep(20);
          },
          { owner: `ts-replica-${i}`, oncePerMs: 60_000, ttlMs: 5_000 },
        );
      }),
    );
    assert.equal(ran.length, 1, `round ${round}: fn ran ${ran.length} times: ${ran.join(", ")}`);
    const kinds = results.map((r) => r.kind).sort();
    assert.deepEqual(kinds, ["ran", "skipped", "skipped", "skipped", "skipped"], `round ${round}`);
    for (const r of results) {
      if (r.kind === "skipped") assert.equal(r.runBy, ran[0], `round ${round}: a skipped replica names the one that ran`);
      if (r.kind === "ran") assert.equal(r.lease.owner, ran[0]);
    }
  }
});

test("once per period: the next period's fire runs once the hold has passed", async () => {
  const task = "ts/once/next";
  const opts = { oncePerMs: 400, ttlMs: 5_000 };
  const first = await client.run(task, () => "first", { owner: "ts-replica-1", ...opts });
  assert.equal(first.kind, "ran");
  if (first.kind !== "ran") return;
  assert.equal(between(first.lease.acquiredAt, first.lease.holdUntil ?? ""), 200);
  const give = Date.now() + 30_000;
  for (;;) {
    const r = await client.run(task, () => "next", { owner: "ts-replica-2", ...opts });
    if (r.kind === "ran") {
      assert.ok(between(first.lease.holdUntil ?? "", r.lease.acquiredAt) >= 0, "granted no earlier than the hold's end");
      break;
    }
    assert.equal(r.kind, "skipped");
    assert.ok(Date.now() < give, "the task never came free");
    await sleep(20);
  }
});

test("once per period is refused with waitMs or minHoldMs, or a period under 2 ms, before anything is claimed", async () => {
  const task = "ts/once/bad";
  const fn = () => assert.fail("fn ran");
  const bad = [
    [{ oncePerMs: 60_000, waitMs: 1_000 }, /oncePerMs, waitMs/],
    [{ oncePerMs: 60_000, minHoldMs: 1_000 }, /oncePerMs, minHoldMs/],
    [{ oncePerMs: 1 }, /oncePerMs/],
    [{ oncePerMs: Number.NaN }, /oncePerMs/],
  ];
  for (const [options, message] of bad) {
    await assert.rejects(client.run(task, fn, /** @type {any} */ (options)), (err) => err instanceof TypeError && message.test(err.message));
  }
  assert.equal(await client.get(task), null);
  assert.deepEqual(await ask(runsUrl, "GET", `/v1/leases/${encodeURIComponent(task)}/history`), { events: [] });
});

test("run() records a success with its release: exit_code 0 and the duration, in the history", async () => {
  const task = "ts/outcome/ok";
  /** @type {any} */
  let r;
  const counted = await runsCounted(async () => {
    r = await client.run(task, async () => {
      await sleep(50);
      return "done";
    });
  });
  assert.equal(r.kind, "ran");
  const [released] = await releasedEvents(runsUrl, task, r.lease.token);
  assert.ok(released?.run, `the released event carries the run: ${JSON.stringify(released)}`);
  const { duration_ms: duration, ...rest } = released.run;
  assert.deepEqual(rest, { outcome: "succeeded", exit_code: 0, error: "", lost: false });
  assert.ok(duration >= 40, `duration_ms ${duration} for a body that slept 50 ms`);
  assert.deepEqual(counted, { succeeded: 1, failed: 0, lost: 0 });
});

test("run() records a thrown error with its release, with no exit code, and passes the error on", async () => {
  const task = "ts/outcome/threw";
  /** @type {number | undefined} */
  let leaseToken;
  const counted = await runsCounted(async () => {
    await assert.rejects(
      client.run(task, (lease) => {
        leaseToken = lease.token;
        throw new Error("report failed: disk full");
      }),
      /report failed: disk full/,
    );
  });
  const [released] = await releasedEvents(runsUrl, task, leaseToken ?? 0);
  assert.ok(released?.run, `the released event carries the run: ${JSON.stringify(released)}`);
  assert.equal(released.run.outcome, "failed");
  assert.equal(released.run.error, "report failed: disk full");
  assert.equal(released.run.lost, false);
  assert.equal("exit_code" in released.run, false, "a thrown error has no exit status");
  assert.deepEqual(counted, { succeeded: 0, failed: 1, lost: 0 });
  assert.equal(await client.get(task), null, "released after fn threw");
});

test("run() cuts a long error to 1024 bytes of valid UTF-8, without NUL", async () => {
  const task = "ts/outcome/long";
  /** @type {number | undefined} */
  let leaseToken;
  // "ab\0\uD800" is 5 bytes once the NUL is dropped and the lone surrogate is U+FFFD; each é
  // is 2, so the 1024th byte starts an é that does not fit whole.
  const message = "ab\0\uD800" + "é".repeat(700);
  await assert.rejects(
    client.run(task, (lease) => {
      leaseToken = lease.token;
      throw new Error(message);
    }),
    (err) => err instanceof Error && err.message === message,
  );
  const [released] = await releasedEvents(runsUrl, task, leaseToken ?? 0);
  assert.ok(released?.run, `the released event carries the run: ${JSON.stringify(released)}`);
  assert.equal(released.run.error, "ab\uFFFD" + "é".repeat(509));
  assert.equal(Buffer.byteLength(released.run.error), 1023);
});

test("a release may carry an exit status, kept in the history", async () => {
  const task = "ts/outcome/exit";
  const c = await client.claim(task, { owner: "ts-a", ttlMs: 30_000 });
  assert.equal(c.kind, "acquired");
  if (c.kind !== "acquired") return;
  const r = await client.release(task, { owner: "ts-a", token: c.lease.token, run: { exitCode: 3, durationMs: 1_250 } });
  assert.deepEqual(r, { kind: "released", released: true });
  const [released] = await releasedEvents(runsUrl, task, c.lease.token);
  assert.deepEqual(released?.run, { outcome: "failed", exit_code: 3, error: "", duration_ms: 1_250, lost: false });
});

test("run() records a lost lease with its release: counted lost, though the release ends nothing", async () => {
  const task = "ts/outcome/lost";
  /** @type {any} */
  let r;
  const counted = await runsCounted(async () => {
    r = await client.run(
      task,
      async (lease, signal) => {
        // An operator ends the lease under the run.
        const revoked = await ask(runsUrl, "POST", `/v1/leases/${encodeURIComponent(task)}/revoke`, { token: lease.token });
        assert.equal(revoked.released, true);
        const reason = await aborted(signal);
        assert.ok(reason instanceof LeaseLostError);
        return "stopped";
      },
      { ttlMs: 2_000 },
    );
  });
  assert.equal(r.kind, "ran");
  assert.equal(r.lost, true);
  assert.deepEqual(counted, { succeeded: 0, failed: 0, lost: 1 });
  // The revoke's released event is the grant's only one: the run's release found no lease.
  const events = await releasedEvents(runsUrl, task, r.lease.token);
  assert.equal(events.length, 1, JSON.stringify(events));
  assert.equal("run" in events[0], false);
});
