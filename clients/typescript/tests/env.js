// The sidecars the suite runs against, started by e2e/typescript_test.go (`make test`).
import { createServer } from "node:net";

/** @param {string} name */
function need(name) {
  const v = process.env[name];
  if (!v) {
    throw new Error(
      `${name} is not set: these tests run against real sidecars started by the Go test; ` +
        "run `scripts/with-postgres.sh go test -run TestTypeScriptClient ./e2e/` from the repository root",
    );
  }
  return v;
}

export const url = need("LEASEHOLD_TEST_URL");
export const token = need("LEASEHOLD_TEST_TOKEN");
/** A sidecar whose store is down: every lease call is 503. */
export const downUrl = need("LEASEHOLD_TEST_DOWN_URL");
/** A sidecar of its own the suite may stop (SIGSTOP/SIGCONT, SIGTERM). */
export const spareUrl = need("LEASEHOLD_TEST_SPARE_URL");
export const sparePid = Number(need("LEASEHOLD_TEST_SPARE_PID"));
/**
 * A sidecar over url's store, wanting the same token, that only runs.test.js asks: its
 * /metrics count that file's runs alone.
 */
export const runsUrl = need("LEASEHOLD_TEST_RUNS_URL");
/** unix:PATH: a sidecar on a Unix socket over url's store, wanting the same token. */
export const unixUrl = need("LEASEHOLD_TEST_UNIX_URL");
/** A PostgreSQL database of a job's own, with `leasehold fence install` applied. */
export const fencePgUrl = need("LEASEHOLD_TEST_FENCE_PG_URL");
/** A PostgreSQL database without the fence. */
export const barePgUrl = need("LEASEHOLD_TEST_BARE_PG_URL");
/** A task declared on url's store with a max_ttl (TASK=MAX_TTL_MS). */
const capped = need("LEASEHOLD_TEST_CAPPED_TASK");
export const cappedTask = capped.slice(0, capped.lastIndexOf("="));
export const cappedMaxTtlMs = Number(capped.slice(capped.lastIndexOf("=") + 1));

/** @returns {Promise<string>} the address of a port nobody listens on. */
export function closedUrl() {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const addr = /** @type {import("node:net").AddressInfo} */ (srv.address());
      srv.close(() => resolve(`http://127.0.0.1:${addr.port}`));
    });
  });
}

/**
 * Polls pred every 20 ms until it is true, for at most 30 s.
 * @param {() => boolean | Promise<boolean>} pred
 * @param {string} what
 */
export async function waitFor(pred, what) {
  const give = Date.now() + 30_000;
  while (!(await pred())) {
    if (Date.now() > give) throw new Error(`gave up after 30 s waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/**
 * Resolves signal's reason once it aborts; rejects after 30 s.
 * @param {AbortSignal} signal
 * @returns {Promise<any>}
 */
export function aborted(signal) {
  if (signal.aborted) return Promise.resolve(signal.reason);
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("the signal did not abort within 30 s")), 30_000);
    signal.addEventListener("abort", () => {
      clearTimeout(timer);
      resolve(signal.reason);
    });
  });
}

/**
 * Asks the sidecar at base with the suite's token; answers the decoded JSON, or throws with
 * the status.
 * @param {string} base
 * @param {string} method
 * @param {string} path
 * @param {object} [body]
 * @returns {Promise<any>}
 */
export async function ask(base, method, path, body) {
  const res = await fetch(base + path, {
    method,
    headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`${method} ${path}: HTTP ${res.status}: ${text}`);
  return text ? JSON.parse(text) : {};
}

/**
 * The history's released events of task's grant with this token (the newest first).
 * @param {string} base
 * @param {string} task
 * @param {number} leaseToken
 * @returns {Promise<any[]>}
 */
export async function releasedEvents(base, task, leaseToken) {
  const { events } = await ask(base, "GET", `/v1/leases/${encodeURIComponent(task)}/history`);
  return events.filter((/** @type {any} */ e) => e.kind === "released" && e.token === leaseToken);
}

/**
 * The sidecar's leasehold_runs_total by outcome (succeeded, failed, lost).
 * @param {string} base
 * @returns {Promise<Record<string, number>>}
 */
export async function runsTotal(base) {
  const res = await fetch(base + "/metrics");
  const text = await res.text();
  /** @type {Record<string, number>} */
  const out = {};
  for (const m of text.matchAll(/^leasehold_runs_total\{outcome="(\w+)"\} (\d+)$/gm)) out[m[1]] = Number(m[2]);
  if (Object.keys(out).length !== 3) throw new Error(`leasehold_runs_total: want its three outcomes, got ${JSON.stringify(out)}`);
  return out;
}

/** @param {number} ms */
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
