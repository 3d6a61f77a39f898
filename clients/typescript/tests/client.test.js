// The client against real sidecars (see env.js).
import { test } from "node:test";
import assert from "node:assert/strict";
import { LeaseholdClient, LeaseholdError, LeaseLostError } from "../index.js";
import { url, token, downUrl, spareUrl, sparePid, closedUrl, waitFor, aborted } from "./env.js";

const client = new LeaseholdClient({ baseUrl: url, token });

test("claim acquires a free task and reports the lease and its fencing token", async () => {
  const r = await client.claim("ts/acquire", { owner: "ts-a", ttlMs: 30_000, note: "v1" });
  assert.equal(r.kind, "acquired");
  if (r.kind !== "acquired") return;
  assert.equal(r.lease.task, "ts/acquire");
  assert.equal(r.lease.owner, "ts-a");
  assert.equal(r.lease.note, "v1");
  assert.equal(r.lease.ttlMs, 30_000);
  assert.ok(Number.isInteger(r.lease.token) && r.lease.token > 0, `token ${r.lease.token}`);
  const now = await client.get("ts/acquire");
  assert.equal(now?.owner, "ts-a");
  assert.equal(now?.token, r.lease.token);
});

test("a claim of a live lease of another owner is held, naming the holder", async () => {
  const first = await client.claim("ts/held", { owner: "ts-holder", ttlMs: 30_000 });
  assert.equal(first.kind, "acquired");
  const r = await client.claim("ts/held", { owner: "ts-rival", ttlMs: 30_000 });
  assert.equal(r.kind, "held");
  if (r.kind !== "held") return;
  assert.equal(r.holder.owner, "ts-holder");
  assert.ok(r.holder.ttlRemainingMs > 0 && r.holder.ttlRemainingMs <= 30_000, `ttlRemainingMs ${r.holder.ttlRemainingMs}`);
  assert.match(r.detail, /ts-holder/);
});

test("a closed port is unavailable, never held", async () => {
  const c = new LeaseholdClient({ baseUrl: await closedUrl(), token });
  const r = await c.claim("ts/closed", { owner: "ts-a" });
  assert.equal(r.kind, "unavailable");
  if (r.kind === "unavailable") assert.match(r.detail, /did not answer/);
  assert.equal((await c.renew("ts/closed", { owner: "ts-a" })).kind, "unavailable");
  assert.equal((await c.release("ts/closed", { owner: "ts-a" })).kind, "unavailable");
  assert.equal((await c.keepalive("ts/closed", { owner: "ts-a" })).kind, "unavailable");
  let called = false;
  const run = await c.run("ts/closed", () => {
    called = true;
  });
  assert.equal(run.kind, "unavailable");
  assert.equal(called, false);
});

test("a sidecar whose store is down answers unavailable, never held", async () => {
  const c = new LeaseholdClient({ baseUrl: downUrl });
  const r = await c.claim("ts/down", { owner: "ts-a", ttlMs: 1000 });
  assert.equal(r.kind, "unavailable");
  assert.equal((await c.renew("ts/down", { owner: "ts-a" })).kind, "unavailable");
  assert.equal((await c.release("ts/down", { owner: "ts-a" })).kind, "unavailable");
  assert.equal((await c.keepalive("ts/down", { owner: "ts-a", ttlMs: 1000 })).kind, "unavailable");
});

test("requests the sidecar refuses as wrong throw a LeaseholdError", async () => {
  const anonymous = new LeaseholdClient({ baseUrl: url });
  await assert.rejects(anonymous.claim("ts/auth", { owner: "ts-a" }), (err) => {
    assert.ok(err instanceof LeaseholdError);
    assert.equal(err.status, 401);
    return true;
  });
  const wrong = new LeaseholdClient({ baseUrl: url, token: "not-the-token" });
  await assert.rejects(wrong.keepalive("ts/auth", { owner: "ts-a" }), (err) => err instanceof LeaseholdError && err.status === 401);
  await assert.rejects(client.claim("ts/bad", { owner: "ts-a", ttlMs: 5 }), (err) => {
    assert.ok(err instanceof LeaseholdError);
    assert.equal(err.status, 422);
    assert.deepEqual(
      err.invalidParams.map((p) => p.name),
      ["ttl_ms"],
    );
    return true;
  });
  await assert.rejects(client.claim("leasehold:prune", { owner: "ts-a" }), (err) => err instanceof LeaseholdError && err.status === 403);
  assert.equal(await client.get("ts/bad"), null, "a refused claim wrote nothing");
});

test("renew with the token extends the grant; a wrong token is refused", async () => {
  const c = await client.claim("ts/renew", { owner: "ts-a", ttlMs: 30_000 });
  assert.equal(c.kind, "acquired");
  if (c.kind !== "acquired") return;
  const r = await client.renew("ts/renew", { owner: "ts-a", token: c.lease.token });
  assert.equal(r.kind, "renewed");
  if (r.kind !== "renewed") return;
  assert.equal(r.lease.token, c.lease.token);
  assert.equal(r.lease.renewCount, 1);
  const bad = await client.renew("ts/renew", { owner: "ts-a", token: c.lease.token + 1 });
  assert.equal(bad.kind, "lost");
  if (bad.kind === "lost") assert.equal(bad.reason, "token_mismatch");
});

test("release frees the task; the next grant has a higher fencing token", async () => {
  const c = await client.claim("ts/release", { owner: "ts-a", ttlMs: 30_000 });
  assert.equal(c.kind, "acquired");
  if (c.kind !== "acquired") return;
  assert.deepEqual(await client.release("ts/release", { owner: "ts-a", token: c.lease.token }), { kind: "released", released: true });
  assert.equal(await client.get("ts/release"), null);
  const after = await client.renew("ts/release", { owner: "ts-a", token: c.lease.token });
  assert.equal(after.kind, "lost");
  if (after.kind === "lost") assert.equal(after.reason, "not_held");
  assert.deepEqual(await client.release("ts/release", { owner: "ts-a", token: c.lease.token }), { kind: "released", released: false });
  const next = await client.claim("ts/release", { owner: "ts-b", ttlMs: 30_000 });
  assert.equal(next.kind, "acquired");
  if (next.kind === "acquired") assert.ok(next.lease.token > c.lease.token, `token ${next.lease.token} after ${c.lease.token}`);
});

test("a keepalive holder holds the lease through renewals and releases it", async () => {
  const k = await client.keepalive("ts/keepalive", { owner: "ts-k", ttlMs: 3000 });
  assert.equal(k.kind, "acquired");
  if (k.kind !== "acquired") return;
  const { holder } = k;
  const token0 = holder.token;
  await waitFor(() => holder.lease.renewCount >= 2, "two renewals");
  assert.equal(holder.signal.aborted, false);
  assert.equal(holder.token, token0);
  const rival = await client.claim("ts/keepalive", { owner: "ts-rival", ttlMs: 1000 });
  assert.equal(rival.kind, "held");
  if (rival.kind === "held") assert.equal(rival.holder.owner, "ts-k");
  const rivalStream = await client.keepalive("ts/keepalive", { owner: "ts-rival", ttlMs: 1000 });
  assert.equal(rivalStream.kind, "held");
  await holder.release();
  await holder.release();
  assert.equal(await client.get("ts/keepalive"), null, "free once release() resolves");
  assert.equal(holder.signal.aborted, false, "a release on purpose is no loss");
});

test("a keepalive holder's signal aborts when the lease is taken from under it", async () => {
  const k = await client.keepalive("ts/lost", { owner: "ts-k", ttlMs: 2000 });
  assert.equal(k.kind, "acquired");
  if (k.kind !== "acquired") return;
  const { holder } = k;
  // Released behind the stream's back, through the same sidecar: the sidecar ends the
  // stream with its released event (reason release) before the release answers.
  assert.deepEqual(await client.release("ts/lost", { owner: "ts-k", token: holder.token }), { kind: "released", released: true });
  const reason = await aborted(holder.signal);
  assert.ok(reason instanceof LeaseLostError);
  assert.equal(reason.reason, "release");
  await holder.release();
});

test("a keepalive holder's signal aborts at its local deadline when the sidecar stops answering", async () => {
  const spare = new LeaseholdClient({ baseUrl: spareUrl });
  const k = await spare.keepalive("ts/deadline", { owner: "ts-k", ttlMs: 500 });
  assert.equal(k.kind, "acquired");
  if (k.kind !== "acquired") return;
  process.kill(sparePid, "SIGSTOP");
  try {
    const reason = await aborted(k.holder.signal);
    assert.ok(reason instanceof LeaseLostError);
    assert.equal(reason.reason, "deadline");
  } finally {
    process.kill(sparePid, "SIGCONT");
  }
  await k.holder.release();
});

test("a keepalive holder's signal aborts when the sidecar shuts down", async () => {
  const spare = new LeaseholdClient({ baseUrl: spareUrl });
  const k = await spare.keepalive("ts/shutdown", { owner: "ts-k", ttlMs: 30_000 });
  assert.equal(k.kind, "acquired");
  if (k.kind !== "acquired") return;
  process.kill(sparePid, "SIGTERM");
  const reason = await aborted(k.holder.signal);
  assert.ok(reason instanceof LeaseLostError);
  assert.equal(reason.reason, "shutdown");
  await k.holder.release(); // the sidecar is gone: still no throw
});

test("run() runs fn while holding the lease and releases it when fn settles", async () => {
  let seen;
  const r = await client.run(
    "ts/run",
    async (lease, signal) => {
      seen = lease;
      assert.equal(signal.aborted, false);
      const rival = await client.claim("ts/run", { owner: "ts-rival", ttlMs: 1000 });
      assert.equal(rival.kind, "held");
      return 42;
    },
    { ttlMs: 3000 },
  );
  assert.equal(r.kind, "ran");
  if (r.kind !== "ran") return;
  assert.equal(r.value, 42);
  assert.equal(r.lost, false);
  assert.ok(seen && seen.token > 0);
  assert.equal(await client.get("ts/run"), null, "released once run() resolves");

  await assert.rejects(
    client.run("ts/run", () => {
      throw new Error("boom");
    }),
    /boom/,
  );
  assert.equal(await client.get("ts/run"), null, "released after fn threw");
});

test("run() does not call fn when the task is held", async () => {
  const c = await client.claim("ts/run-held", { owner: "ts-holder", ttlMs: 30_000 });
  assert.equal(c.kind, "acquired");
  let called = false;
  const r = await client.run("ts/run-held", () => {
    called = true;
  });
  assert.equal(r.kind, "held");
  if (r.kind === "held") assert.equal(r.holder.owner, "ts-holder");
  assert.equal(called, false);
});

test("run() tells fn through its signal when the lease is lost", async () => {
  const r = await client.run(
    "ts/run-lost",
    async (lease, signal) => {
      await client.release("ts/run-lost", { owner: lease.owner, token: lease.token });
      const reason = await aborted(signal);
      return reason.reason;
    },
    { ttlMs: 2000 },
  );
  assert.equal(r.kind, "ran");
  if (r.kind !== "ran") return;
  assert.equal(r.value, "release");
  assert.equal(r.lost, true);
});
