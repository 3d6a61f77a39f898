// The public API as a TypeScript project uses it, type-checked against index.d.ts (tsc --noEmit,
// e2e TestTypeScriptDeclarations) and never run. It imports the package by its name, so the
// package.json "exports" → "types" mapping is checked too. Each @ts-expect-error is a misuse
// the declarations must refuse: tsc fails if one of them compiles.
import {
  DEFAULT_ADDR,
  ENV_ADDR,
  ENV_TOKEN_FILE,
  KeepaliveHolder,
  LeaseholdClient,
  LeaseholdError,
  LeaseLostError,
  MAX_TTL_MS,
  MIN_TTL_MS,
  PRUNE_LOCK_KEY,
  defaultOwner,
  leaseholdPruneLock,
  LeasedMonitorTask,
  LeaseUnavailableError,
  tryClaimLease,
  renewLease,
  releaseLease,
  fence,
  fenceHeaders,
  fenceMiddleware,
  requestFence,
  StaleTokenError,
  FenceNotInstalledError,
} from "@leasehold/client";
import type {
  ClaimOptions,
  ClaimResult,
  ClientOptions,
  Held,
  Holder,
  KeepaliveOptions,
  KeepaliveResult,
  Lease,
  OncePerOptions,
  OncePerResult,
  Ran,
  PruneLease,
  PruneLock,
  PruneLockRequest,
  PruneLockResult,
  ReleaseResult,
  RenewResult,
  RunOutcome,
  RunResult,
  Skipped,
  Unavailable,
  MonitorLeaseClaim,
  MonitorLeaseRenew,
  MonitorLeaseRelease,
  MonitorLeaseResult,
  TableMonitorLease,
} from "@leasehold/client";

const addrVar: "LEASEHOLD_ADDR" = ENV_ADDR;
const tokenVar: "LEASEHOLD_TOKEN_FILE" = ENV_TOKEN_FILE;
const defaultAddr: string = DEFAULT_ADDR;
const bounds: [number, number] = [MIN_TTL_MS, MAX_TTL_MS];
const pruneKey: "telescope:prune" = PRUNE_LOCK_KEY;
export const constants = { addrVar, tokenVar, defaultAddr, bounds, pruneKey };

// Every way to make a client: the environment's, an address, a token or its file, a fetch.
export const fromEnv = new LeaseholdClient();
const options: ClientOptions = { baseUrl: "http://127.0.0.1:7411", token: "secret", timeoutMs: 5_000 };
export const withToken = new LeaseholdClient(options);
export const withTokenFile = new LeaseholdClient({ tokenFile: "/run/secrets/leasehold" });
export const onSocket = new LeaseholdClient({ baseUrl: "unix:/run/leasehold/leasehold.sock" });
export const withFetch = new LeaseholdClient({ fetch: (input, init) => fetch(input, init) });
// @ts-expect-error: the address is a string
export const badAddr = new LeaseholdClient({ baseUrl: 7411 });
// @ts-expect-error: no such option
export const badOption = new LeaseholdClient({ base_url: "http://127.0.0.1:7411" });

/** The lease's fields, with their types. */
export function describeLease(l: Lease): string {
  const token: number = l.token;
  const times: string[] = [l.acquiredAt, l.renewedAt, l.expiresAt];
  const numbers: number[] = [l.ttlMs, l.ttlRemainingMs, l.renewCount];
  // @ts-expect-error: a lease is read-only
  l.token = 2;
  // The end of a minimum hold, absent when the claim asked for none.
  const hold: string | undefined = l.holdUntil;
  // @ts-expect-error: holdUntil may be absent
  const sure: string = l.holdUntil;
  void sure;
  return `${l.task} ${l.owner} ${token} ${times.join()} ${numbers.join()} ${l.note} ${hold ?? "no hold"}`;
}

/** A holder: a live lease's owner, or a resting task's last owner, with the hold's end. */
export function describeHolder(h: Holder): string {
  const resting: boolean = h.resting;
  const acquired: string | undefined = h.acquiredAt;
  const hold: string | undefined = h.holdUntil;
  // @ts-expect-error: a holder is read-only
  h.resting = false;
  return `${h.owner} ${h.expiresAt} ${h.ttlRemainingMs} ${resting} ${acquired ?? ""} ${hold ?? ""}`;
}

/** A claim's outcome is a discriminated union: the lease only when acquired. */
export async function claim(c: LeaseholdClient): Promise<number | null> {
  const owner = defaultOwner();
  const r: ClaimResult = await c.claim("nightly-report", { owner, ttlMs: 30_000, note: "v1" });
  const once: ClaimOptions = { owner, ttlMs: 30_000, minHoldMs: 1_800_000 };
  await c.claim("nightly-report", once);
  // @ts-expect-error: a minimum hold is a number of ms
  await c.claim("nightly-report", { owner, minHoldMs: "30m" });
  // @ts-expect-error: the lease is unreachable until the result is narrowed to acquired
  r.lease.token;
  // @ts-expect-error: an owner is required
  await c.claim("nightly-report", { ttlMs: 30_000 });
  switch (r.kind) {
    case "acquired": {
      const renewed: RenewResult = await c.renew("nightly-report", { owner, token: r.lease.token, ttlMs: 30_000 });
      if (renewed.kind === "lost") {
        const why: string = renewed.reason + renewed.detail;
        void why;
      } else if (renewed.kind === "renewed") {
        describeLease(renewed.lease);
      }
      const released: ReleaseResult = await c.release("nightly-report", { owner, token: r.lease.token });
      if (released.kind === "released") {
        const freed: boolean = released.released;
        const restsUntil: string | undefined = released.holdUntil;
        void [freed, restsUntil];
      }
      // A release may say what the job run under the lease did.
      const outcome: RunOutcome = { exitCode: 3, durationMs: 1_250 };
      await c.release("nightly-report", { owner, token: r.lease.token, run: outcome });
      await c.release("nightly-report", { owner, run: { error: "disk full", durationMs: 10, lost: true } });
      // @ts-expect-error: an outcome says how long the run took
      await c.release("nightly-report", { owner, run: { exitCode: 0 } });
      return r.lease.token;
    }
    case "held": {
      const held: Held = r;
      const holder: string = held.holder.owner;
      const left: number = held.holder.ttlRemainingMs;
      describeHolder(held.holder);
      return holder.length + left;
    }
    case "unavailable": {
      const u: Unavailable = r;
      return u.detail.length;
    }
    default: {
      const never: never = r;
      return never;
    }
  }
}

/** get answers the lease or null, and throws a LeaseholdError when it cannot tell. */
export async function get(c: LeaseholdClient): Promise<string> {
  try {
    const l: Lease | null = await c.get("nightly-report");
    return l === null ? "free" : l.owner;
  } catch (err) {
    if (err instanceof LeaseholdError) {
      const status: number = err.status;
      const type: string | undefined = err.type;
      const fields: string[] = err.invalidParams.map((p) => `${p.name}: ${p.reason}`);
      return `${status} ${type ?? ""} ${fields.join()}`;
    }
    throw err;
  }
}

/** A keepalive holder: its signal aborts with a LeaseLostError. */
export async function keepalive(c: LeaseholdClient): Promise<void> {
  const opts: KeepaliveOptions = { owner: "w1", ttlMs: 10_000, note: "n", waitMs: 1_000, minHoldMs: 60_000 };
  const k: KeepaliveResult = await c.keepalive("nightly-report", opts);
  if (k.kind !== "acquired") return;
  const holder: KeepaliveHolder = k.holder;
  const token: number = holder.token;
  holder.signal.addEventListener("abort", () => {
    const reason: unknown = holder.signal.reason;
    if (reason instanceof LeaseLostError) {
      const why: string = `${reason.reason}: ${reason.detail} (token ${token})`;
      void why;
    }
  });
  describeLease(holder.lease);
  const done: Promise<void> = holder.release();
  await done;
  await holder.release({ run: { exitCode: 0, durationMs: 5 } });
  // @ts-expect-error: an outcome's exit code is a number
  await holder.release({ run: { exitCode: "0", durationMs: 5 } });
}

/** run: fn's value comes back typed, with the lease it ran under. */
export async function run(c: LeaseholdClient): Promise<number> {
  const r: RunResult<number> = await c.run(
    "nightly-report",
    async (lease: Lease, signal: AbortSignal) => {
      signal.throwIfAborted();
      return lease.token;
    },
    { ttlMs: 10_000 },
  );
  if (r.kind === "ran") {
    const lost: boolean = r.lost;
    return lost ? -1 : r.value;
  }
  // @ts-expect-error: no value unless fn ran
  return r.value;
}

/** run's scheduled-job mode: ran, skipped (another replica's run this period) or unavailable. */
export async function oncePer(c: LeaseholdClient): Promise<string> {
  const opts: OncePerOptions = { oncePerMs: 3_600_000, ttlMs: 60_000 };
  const r: OncePerResult<number> = await c.run("hourly-prune", async (lease) => lease.token, opts);
  // @ts-expect-error: a scheduled run is never held, but skipped
  if (r.kind === "held") return "held";
  // @ts-expect-error: without oncePerMs, run answers held, not skipped
  const plain: OncePerResult<number> = await c.run("hourly-prune", async (lease) => lease.token);
  void plain;
  // @ts-expect-error: once per period is exclusive with waiting
  await c.run("hourly-prune", () => 1, { oncePerMs: 60_000, waitMs: 1_000 });
  // @ts-expect-error: once per period sets the minimum hold itself
  await c.run("hourly-prune", () => 1, { oncePerMs: 60_000, minHoldMs: 1_000 });
  // A minimum hold of one's own, without the skipped answer.
  const held: RunResult<void> = await c.run("hourly-prune", () => undefined, { minHoldMs: 30_000 });
  void held;
  switch (r.kind) {
    case "ran": {
      const ran: Ran<number> = r;
      return `ran under token ${ran.value}`;
    }
    case "skipped": {
      const s: Skipped = r;
      const by: string = s.runBy;
      const at: string | undefined = s.startedAt;
      const running: boolean = s.running;
      const free: string = s.freeAt;
      // @ts-expect-error: fn did not run
      s.value;
      return `${by} ${running ? "runs" : "ran"} it (since ${at ?? "?"}); free at ${free}; ${describeHolder(s.holder)} ${s.detail}`;
    }
    case "unavailable":
      return r.detail;
    default: {
      const never: never = r;
      return never;
    }
  }
}

/** The console's prune-lock seam, structurally: leasehold's adapter is a PruneLock. */
export async function prune(c: LeaseholdClient, pruneOnce: () => Promise<void>): Promise<void> {
  const lock: PruneLock = leaseholdPruneLock(c);
  // The ttl a daily prune asks for (three intervals); the adapter clamps it to leasehold's range.
  const request: PruneLockRequest = { key: PRUNE_LOCK_KEY, owner: `${defaultOwner()}`, ttlMs: 3 * 24 * 3_600_000 };
  const r: PruneLockResult = await lock.acquire(request);
  if (!r.acquired) {
    const reason: "held" | "unavailable" = r.reason;
    const detail: string | undefined = r.detail;
    // @ts-expect-error: no lease unless acquired
    r.lease;
    if (reason === "unavailable") await pruneOnce(); // fail open
    void detail;
    return;
  }
  const lease: PruneLease = r.lease;
  const expires: number = lease.expiresAtMs;
  const token: number = lease.token;
  try {
    await pruneOnce();
  } finally {
    await lease.release();
  }
  void [expires, token, lease.key, lease.owner];
  // @ts-expect-error: a request needs a ttl
  await lock.acquire({ key: PRUNE_LOCK_KEY, owner: "o" });
}

/** A host's own PruneLock satisfies the same interface. */
export const inMemory: PruneLock = {
  async acquire({ key, owner, ttlMs }) {
    return {
      acquired: true,
      lease: { key, owner, token: 1, expiresAtMs: Date.now() + ttlMs, release: async () => undefined },
    };
  },
};

// The wallet seed's monitor-lease API, as the seed is written.

export async function seedMonitor(client: LeaseholdClient, ownerId: string): Promise<void> {
  const helper = new LeasedMonitorTask(client);
  const { ran }: { ran: boolean } = await helper.run("proof-acquisition", ownerId, 30_000, async () => {
    // task body runs only when lease is acquired
  });
  if (!ran) console.log("lease held by another instance – skipping");
  await new LeasedMonitorTask({ baseUrl: "http://127.0.0.1:7411" }).run("t", ownerId, 1_000, async (signal) => void signal.aborted);
  // @ts-expect-error: the seed's order is (taskName, ownerId, ttlMs, body)
  await helper.run("t", 30_000, ownerId, async () => {});
  // @ts-expect-error: the client's run is (task, fn, options), not the seed's
  await client.run("t", ownerId, 30_000, async () => {});

  const claim: MonitorLeaseClaim = { taskName: "t", ownerId, ttlMs: 30_000, note: "n" };
  const r: MonitorLeaseResult = await tryClaimLease(client, claim, new Date());
  const row: TableMonitorLease | undefined = r.lease;
  const renew: MonitorLeaseRenew = { taskName: "t", ownerId, ttlMs: 30_000, note: "renewed" };
  const renewed: boolean = (await renewLease(client, renew)).acquired;
  const release: MonitorLeaseRelease = { taskName: "t", ownerId };
  const released: boolean = await releaseLease(client, release);
  // @ts-expect-error: a claim needs its ttl
  await tryClaimLease(client, { taskName: "t", ownerId });
  void [row?.expiresAt.getTime(), row?.renewCount, row?.token, renewed, released, LeaseUnavailableError];
  await client.renew("t", { owner: ownerId, note: "carried" });
}

// Fencing at the resource, with any driver's query function.
declare const pgClient: { query(sql: string, params: unknown[]): Promise<{ rows: unknown[] }> };

export async function fencedWrite(lease: Lease): Promise<void> {
  await pgClient.query("BEGIN", []);
  try {
    await fence((sql, params) => pgClient.query(sql, params), lease.task, lease.token);
    await pgClient.query("INSERT INTO results (v) VALUES ($1)", ["x"]);
    await pgClient.query("COMMIT", []);
  } catch (err) {
    await pgClient.query("ROLLBACK", []);
    if (err instanceof StaleTokenError) console.log(err.task, err.token, err.highest);
    if (err instanceof FenceNotInstalledError) throw err;
  }
  await fence((sql, params) => pgClient.query(sql, params), "t", 1n, { dialect: "sqlite" });
  // @ts-expect-error: no such dialect
  await fence((sql, params) => pgClient.query(sql, params), "t", 1, { dialect: "mysql" });
  const headers: Record<string, string> = fenceHeaders(lease.task, lease.token);
  await fetch("http://127.0.0.1:8080/write", { method: "POST", headers });
}

declare const req: { headers: Record<string, string | string[] | undefined> };
declare const res: { writeHead(status: number, headers: Record<string, string | number>): unknown; end(body?: string): unknown };
export const handler = fenceMiddleware({ query: (sql, params) => pgClient.query(sql, params) }, (rq: typeof req, rs: typeof res) => {
  const f = requestFence(rq);
  rs.end(f ? `${f.task}@${f.token}` : "");
});
void handler(req, res);
