// The wallet toolkit seed's monitor-lease API, as the seed is written, over a leasehold
// sidecar: the functions tryClaimLease / renewLease / releaseLease with the seed's
// MonitorLeaseClaim / Renew / Release / Result shapes, and LeasedMonitorTask, which runs a
// body under a lease renewed by a setInterval at 0.4 × ttl, clears the interval before the
// release, and logs its lease activity with console.log. Where the seed's Knex driver takes
// a Knex, these take a LeaseholdClient; the store's clock, not the caller's `now`, decides
// expiry. A sidecar or store that cannot answer is a LeaseUnavailableError (the seed's Knex
// driver throws its database's error there), never `acquired: false`.
import { LeaseholdClient, MIN_TTL_MS, MAX_TTL_MS } from "./index.js";

/** The sidecar or its store could not answer: the lease's state is unknown, not "held". */
export class LeaseUnavailableError extends Error {
  /** @param {string} op @param {string} taskName @param {string} detail */
  constructor(op, taskName, detail) {
    super(`${op} ${JSON.stringify(taskName)}: leasehold unavailable: ${detail}`);
    this.name = "LeaseUnavailableError";
    this.op = op;
    this.taskName = taskName;
    this.detail = detail;
  }
}

/**
 * The seed's TableMonitorLease row, from a leasehold lease: its fields, and the lease's
 * fencing token.
 * @param {import("./index.js").Lease} l
 * @returns {import("./index.js").TableMonitorLease}
 */
function toRow(l) {
  return {
    created_at: new Date(l.acquiredAt),
    updated_at: new Date(l.renewedAt),
    taskName: l.task,
    ownerId: l.owner,
    expiresAt: new Date(l.expiresAt),
    renewCount: l.renewCount,
    ...(l.note ? { note: l.note } : {}),
    token: l.token,
  };
}

/** @param {unknown} now */
function checkNow(now) {
  if (!(now instanceof Date) || Number.isNaN(now.getTime())) throw new TypeError("now: a valid Date (the store's clock decides expiry; now is accepted for the seed's signature)");
}

/** @param {unknown} client @param {string} fn */
function checkClient(client, fn) {
  if (!(client instanceof LeaseholdClient)) throw new TypeError(`${fn}: the first argument is the LeaseholdClient to ask (where the seed's driver takes a Knex)`);
}

/**
 * Tries to claim a lease on claim.taskName for claim.ownerId: succeeds iff the task is free,
 * its lease expired, or ownerId already holds it (a refresh: same token, renewCount + 1).
 * @param {LeaseholdClient} client
 * @param {import("./index.js").MonitorLeaseClaim} claim
 * @param {Date} [now]
 * @returns {Promise<import("./index.js").MonitorLeaseResult>}
 */
export async function tryClaimLease(client, claim, now = new Date()) {
  checkClient(client, "tryClaimLease");
  checkNow(now);
  const r = await client.claim(claim?.taskName, { owner: claim?.ownerId, ttlMs: claim?.ttlMs, note: claim?.note });
  if (r.kind === "acquired") return { acquired: true, lease: toRow(r.lease) };
  if (r.kind === "held") return { acquired: false };
  throw new LeaseUnavailableError("tryClaimLease", claim.taskName, r.detail);
}

/**
 * Extends ownerId's lease on renew.taskName by renew.ttlMs (its note, when given, replaces
 * the lease's). `acquired: false` when there is no lease, it is another owner's, or it has
 * expired.
 * @param {LeaseholdClient} client
 * @param {import("./index.js").MonitorLeaseRenew} renew
 * @param {Date} [now]
 * @returns {Promise<import("./index.js").MonitorLeaseResult>}
 */
export async function renewLease(client, renew, now = new Date()) {
  checkClient(client, "renewLease");
  checkNow(now);
  return renewToken(client, renew, undefined);
}

/**
 * @param {LeaseholdClient} client
 * @param {import("./index.js").MonitorLeaseRenew} renew
 * @param {number | undefined} token
 * @returns {Promise<import("./index.js").MonitorLeaseResult>}
 */
async function renewToken(client, renew, token) {
  const r = await client.renew(renew?.taskName, { owner: renew?.ownerId, ttlMs: renew?.ttlMs, note: renew?.note, token });
  if (r.kind === "renewed") return { acquired: true, lease: toRow(r.lease) };
  if (r.kind === "lost") return { acquired: false };
  throw new LeaseUnavailableError("renewLease", renew.taskName, r.detail);
}

/**
 * Releases ownerId's lease on release.taskName; false (a no-op) when ownerId holds none.
 * @param {LeaseholdClient} client
 * @param {import("./index.js").MonitorLeaseRelease} release
 * @returns {Promise<boolean>}
 */
export async function releaseLease(client, release) {
  checkClient(client, "releaseLease");
  const r = await client.release(release?.taskName, { owner: release?.ownerId });
  if (r.kind === "released") return r.released;
  throw new LeaseUnavailableError("releaseLease", release.taskName, r.detail);
}

/**
 * Wraps a long-running monitor task body in acquire / renew / release, as the wallet seed's
 * LeasedMonitorTask does:
 *
 *   const helper = new LeasedMonitorTask(client) // or new LeasedMonitorTask({ baseUrl })
 *   const { ran } = await helper.run("proof-acquisition", ownerId, 30_000, async () => { ... })
 */
export class LeasedMonitorTask {
  /** @param {LeaseholdClient | import("./index.js").ClientOptions} [clientOrOptions] */
  constructor(clientOrOptions) {
    /** @readonly */
    this.client = clientOrOptions instanceof LeaseholdClient ? clientOrOptions : new LeaseholdClient(clientOrOptions);
  }

  /**
   * Claims taskName for ownerId and, if it got the lease, runs body while a setInterval
   * renews it every ttlMs × 0.4; the interval is cleared (and a renewal in flight awaited)
   * before the release. Resolves {ran: true} when it held the lease and body completed, and
   * re-throws body's error after that cleanup; {ran: false} when another owner holds a live
   * lease (body never runs). A renewal refused (the lease lost) is logged and stops the
   * renewals; body is not interrupted (it gets an AbortSignal, aborted then, that it may
   * heed). Throws LeaseUnavailableError when the claim cannot be answered.
   * @param {string} taskName
   * @param {string} ownerId
   * @param {number} ttlMs
   * @param {(signal: AbortSignal) => Promise<void>} body
   * @returns {Promise<{ran: boolean}>}
   */
  async run(taskName, ownerId, ttlMs, body) {
    if (typeof taskName !== "string" || taskName === "") throw new TypeError("taskName: a non-empty string, the task to lease");
    if (typeof ownerId !== "string" || ownerId === "") throw new TypeError("ownerId: a non-empty string, this instance's stable identifier");
    if (typeof ttlMs !== "number" || !Number.isInteger(ttlMs) || ttlMs < MIN_TTL_MS || ttlMs > MAX_TTL_MS) {
      throw new TypeError(`ttlMs: an integer from ${MIN_TTL_MS} to ${MAX_TTL_MS} ms, not ${String(ttlMs)}`);
    }
    if (typeof body !== "function") throw new TypeError("body: the async function to run while holding the lease");
    const claimed = await this.client.claim(taskName, { owner: ownerId, ttlMs });
    if (claimed.kind === "held") {
      console.log(`LeasedMonitorTask: ${taskName} is held by ${claimed.holder.owner} until ${claimed.holder.expiresAt}; skipping`);
      return { ran: false };
    }
    if (claimed.kind === "unavailable") {
      console.log(`LeasedMonitorTask: ${taskName}: leasehold unavailable, not running: ${claimed.detail}`);
      throw new LeaseUnavailableError("tryClaimLease", taskName, claimed.detail);
    }
    const { token } = claimed.lease;
    console.log(`LeasedMonitorTask: ${taskName} acquired by ${ownerId} (token ${token}, ttl ${ttlMs} ms)`);
    const lost = new AbortController();
    /** @type {Promise<void> | undefined} */
    let renewing;
    const renewOnce = async () => {
      try {
        const r = await renewToken(this.client, { taskName, ownerId, ttlMs }, token);
        if (!r.acquired) {
          clearInterval(timer);
          console.log(`LeasedMonitorTask: ${taskName} lost by ${ownerId} (token ${token}): the renewal was refused; renewals stopped`);
          lost.abort(new Error(`lease on ${taskName} lost`));
        }
      } catch (err) {
        // Unavailable: the lease may still be ours; the next tick tries again.
        console.log(`LeasedMonitorTask: ${taskName} renewal failed (token ${token}): ${err instanceof Error ? err.message : String(err)}`);
      }
    };
    const timer = setInterval(() => {
      if (renewing === undefined && !lost.signal.aborted) renewing = renewOnce().finally(() => (renewing = undefined));
    }, ttlMs * 0.4);
    try {
      await body(lost.signal);
      return { ran: true };
    } finally {
      clearInterval(timer);
      await renewing;
      try {
        const r = await this.client.release(taskName, { owner: ownerId, token });
        if (r.kind === "released") {
          console.log(`LeasedMonitorTask: ${taskName} released by ${ownerId} (token ${token}${r.released ? "" : ", no longer held"})`);
        } else {
          console.log(`LeasedMonitorTask: ${taskName} release failed (token ${token}), the lease ends at its ttl: ${r.detail}`);
        }
      } catch (err) {
        console.log(`LeasedMonitorTask: ${taskName} release failed (token ${token}): ${err instanceof Error ? err.message : String(err)}`);
      }
    }
  }
}
