// The client against a sidecar on a Unix socket (baseUrl unix:PATH) that shares the store of
// the sidecar at url: what it does over the socket shows over TCP (see env.js).
import { test } from "node:test";
import assert from "node:assert/strict";
import { LeaseholdClient, LeaseLostError } from "../index.js";
import { url, token, unixUrl, aborted, waitFor } from "./env.js";

const sock = new LeaseholdClient({ baseUrl: unixUrl, token });
const tcp = new LeaseholdClient({ baseUrl: url, token });

test("over a Unix socket: claim, renew and release, seen over TCP", async () => {
  const c = await sock.claim("ts/unix", { owner: "ts-sock", ttlMs: 30_000 });
  assert.equal(c.kind, "acquired");
  if (c.kind !== "acquired") return;
  assert.equal((await tcp.get("ts/unix"))?.token, c.lease.token);
  const rival = await tcp.claim("ts/unix", { owner: "ts-tcp", ttlMs: 30_000 });
  assert.equal(rival.kind, "held");
  if (rival.kind === "held") assert.equal(rival.holder.owner, "ts-sock");
  const r = await sock.renew("ts/unix", { owner: "ts-sock", token: c.lease.token });
  assert.equal(r.kind, "renewed");
  assert.deepEqual(await sock.release("ts/unix", { owner: "ts-sock", token: c.lease.token }), { kind: "released", released: true });
  assert.equal(await tcp.get("ts/unix"), null);
  assert.equal(sock.baseUrl, unixUrl, "baseUrl is the address as given");
});

test("over a Unix socket: the token is still asked for, when the sidecar has one", async () => {
  const anonymous = new LeaseholdClient({ baseUrl: unixUrl });
  await assert.rejects(anonymous.claim("ts/unix-auth", { owner: "ts-a" }), (err) => err.status === 401);
});

test("over a Unix socket: a keepalive holder gets renewals, learns of a loss, and hangs up", async () => {
  const k = await sock.keepalive("ts/unix-keepalive", { owner: "ts-sock-k", ttlMs: 1000 });
  assert.equal(k.kind, "acquired");
  if (k.kind !== "acquired") return;
  const first = k.holder.lease.renewCount;
  await waitFor(() => k.holder.lease.renewCount > first, "a renewal over the socket");
  assert.equal((await tcp.get("ts/unix-keepalive"))?.owner, "ts-sock-k");
  // Released behind the stream's back: the sidecar says lost, over the socket.
  assert.deepEqual(await tcp.release("ts/unix-keepalive", { owner: "ts-sock-k", token: k.holder.token }), { kind: "released", released: true });
  const reason = await aborted(k.holder.signal);
  assert.ok(reason instanceof LeaseLostError);
  assert.equal(reason.reason, "not_held");
  await k.holder.release();

  // A holder released on purpose hangs up: release() resolves only once the stream has ended.
  const again = await sock.keepalive("ts/unix-keepalive", { owner: "ts-sock-k", ttlMs: 30_000 });
  assert.equal(again.kind, "acquired");
  if (again.kind !== "acquired") return;
  await again.holder.release();
  assert.equal(await tcp.get("ts/unix-keepalive"), null);
  assert.equal(again.holder.signal.aborted, false);
});

test("over a Unix socket: run() holds the lease while fn runs", async () => {
  const r = await sock.run("ts/unix-run", async (lease) => (await tcp.get("ts/unix-run"))?.token === lease.token, { ttlMs: 3000 });
  assert.equal(r.kind, "ran");
  if (r.kind === "ran") assert.equal(r.value, true);
  assert.equal(await tcp.get("ts/unix-run"), null);
});

test("a Unix socket nobody serves on is unavailable, never held", async () => {
  const c = new LeaseholdClient({ baseUrl: `${unixUrl}.missing`, token });
  const r = await c.claim("ts/unix-down", { owner: "ts-a" });
  assert.equal(r.kind, "unavailable");
  if (r.kind === "unavailable") assert.match(r.detail, /unix:.*\.missing did not answer/);
  assert.equal((await c.keepalive("ts/unix-down", { owner: "ts-a" })).kind, "unavailable");
});

test("a unix: baseUrl needs a path, and brings its own fetch", () => {
  assert.throws(() => new LeaseholdClient({ baseUrl: "unix:" }), /unix: needs the socket's path/);
  assert.throws(() => new LeaseholdClient({ baseUrl: "unix://" }), /unix: needs the socket's path/);
  assert.throws(() => new LeaseholdClient({ baseUrl: unixUrl, fetch: globalThis.fetch }), /fetch: not with a unix: baseUrl/);
  // unix:///abs/path reads as the path, as sqlite:///abs/path does.
  assert.doesNotThrow(() => new LeaseholdClient({ baseUrl: "unix://" + unixUrl.slice("unix:".length) }));
});
