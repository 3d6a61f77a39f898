// Fencing at the resource: the checks a job's own database and an HTTP resource run on the
// task and token a holder sends, so that a holder superseded while it was paused cannot
// write. The DDL is leasehold's (`leasehold fence sql --dialect postgres|sqlite` prints it,
// `leasehold fence install --db URL` applies it); these helpers only call it, through the
// caller's own query function, so that they fit pg, Knex, or any driver without depending on
// one. docs/guarantees.md "Fencing at the resource" says what fencing adds and what it cannot.

/** The request headers that carry a holder's task and token to an HTTP resource. */
export const HEADER_TASK = "Leasehold-Task";
export const HEADER_TOKEN = "Leasehold-Token";

/** The problem types (RFC 9457) fenceMiddleware answers with; the Go middleware's own. */
export const PROBLEM_STALE_TOKEN = "urn:leasehold:problem:stale-token";
export const PROBLEM_FENCE_REQUIRED = "urn:leasehold:problem:fence-required";
export const PROBLEM_INVALID_FENCE = "urn:leasehold:problem:invalid-fence";
export const PROBLEM_FENCE_UNAVAILABLE = "urn:leasehold:problem:fence-unavailable";

/** PostgreSQL's SQLSTATE for a stale token, raised by the fence's guard trigger. */
export const STALE_SQLSTATE = "LH001";

const POSTGRES_CHECK = "SELECT leasehold_fence($1, $2)";
const SQLITE_CHECK =
  "INSERT INTO leasehold_fence (task, token) VALUES (?, ?) ON CONFLICT (task) DO UPDATE " +
  "SET token = excluded.token, updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')";
const SQLITE_HIGHEST = "SELECT token FROM leasehold_fence WHERE task = ?";
const SQLITE_STALE = "leasehold_fence: stale token";
const NOT_INSTALLED = ["42883", "42P01"]; // undefined function, undefined table
const SQLITE_MISSING = "no such table: leasehold_fence";

/**
 * The token is lower than the highest one the resource has seen for the task: a newer
 * holder has written since. The write must not happen; roll the transaction back.
 */
export class StaleTokenError extends Error {
  /** @param {string} task @param {number} token @param {number} highest @param {unknown} cause */
  constructor(task, token, highest, cause) {
    super(`stale fencing token ${token} for task ${JSON.stringify(task)}${highest > 0 ? `: highest seen is ${highest}` : ""}`, { cause });
    this.name = "StaleTokenError";
    this.task = task;
    this.token = token;
    /** The highest token seen for the task, or 0 when it could not be read. */
    this.highest = highest;
  }
}

/** The resource database has no fence: apply `leasehold fence sql` or run `leasehold fence install`. */
export class FenceNotInstalledError extends Error {
  /** @param {unknown} cause */
  constructor(cause) {
    super(
      "fence: the leasehold_fence table or function is missing from this database: apply `leasehold fence sql` or run `leasehold fence install`",
      { cause },
    );
    this.name = "FenceNotInstalledError";
  }
}

/**
 * Checks task's token against the resource's fence, inside the caller's transaction: a
 * higher token is recorded, an equal one accepted, a lower one refused with StaleTokenError
 * (the transaction must then be rolled back). `query(sql, params)` runs one statement in
 * that transaction, e.g. `(sql, params) => client.query(sql, params)` for a pg client on
 * which BEGIN was sent, or `(sql, params) => trx.raw(sql, params)` for Knex. dialect:
 * "postgres" (the default: `SELECT leasehold_fence($1, $2)`) or "sqlite" (`?` placeholders).
 * Resolves the token accepted.
 * @param {(sql: string, params: unknown[]) => Promise<unknown>} query
 * @param {string} task
 * @param {number | bigint} token
 * @param {{dialect?: "postgres" | "sqlite"}} [options]
 * @returns {Promise<number>}
 */
export async function fence(query, task, token, options = {}) {
  if (typeof query !== "function") throw new TypeError("query: a function (sql, params) => Promise running one statement in the writing transaction");
  const t = checkFence(task, token);
  const dialect = options.dialect ?? "postgres";
  if (dialect === "postgres") {
    try {
      await query(POSTGRES_CHECK, [task, t]);
      return t;
    } catch (err) {
      const code = /** @type {any} */ (err)?.code;
      if (code === STALE_SQLSTATE) throw new StaleTokenError(task, t, highestIn(describe(err)), err);
      if (NOT_INSTALLED.includes(code)) throw new FenceNotInstalledError(err);
      throw err;
    }
  }
  if (dialect === "sqlite") {
    try {
      await query(SQLITE_CHECK, [task, t]);
      return t;
    } catch (err) {
      const text = describe(err);
      if (text.includes(SQLITE_STALE)) {
        let highest = 0;
        try {
          highest = firstNumber(await query(SQLITE_HIGHEST, [task]));
        } catch {
          // the refusal stands; only its detail is missing
        }
        throw new StaleTokenError(task, t, highest, err);
      }
      if (text.includes(SQLITE_MISSING)) throw new FenceNotInstalledError(err);
      throw err;
    }
  }
  throw new TypeError(`dialect: postgres or sqlite, not ${JSON.stringify(dialect)}`);
}

/**
 * The headers a request to a fenced HTTP resource carries: Leasehold-Task and
 * Leasehold-Token. Spread them into fetch's headers.
 * @param {string} task
 * @param {number | bigint} token
 * @returns {Record<string, string>}
 */
export function fenceHeaders(task, token) {
  const t = checkFence(task, token);
  return { [HEADER_TASK]: task, [HEADER_TOKEN]: String(t) };
}

/** @type {WeakMap<object, {task: string, token: number}>} */
const fencedRequests = new WeakMap();

/**
 * The task and token fenceMiddleware accepted for req, or undefined outside it: a handler
 * that writes in a transaction of its own fences there too, with these (an equal token is
 * accepted).
 * @param {object} req
 * @returns {{task: string, token: number} | undefined}
 */
export function requestFence(req) {
  return fencedRequests.get(req);
}

/**
 * Fences every request to a Node `http` handler: reads the Leasehold-Task and
 * Leasehold-Token headers, runs the check as one statement of its own through query (on a
 * pool, so it commits and the token is recorded), and only when the token is accepted calls
 * handler(req, res). Otherwise it answers a problem document (application/problem+json) and
 * the handler does not run: 409 stale-token (with task, token, highest_token), 428
 * fence-required (a header missing), 400 invalid-fence (an empty task, a token that is not a
 * decimal integer of at least 1, a header given twice), 503 fence-unavailable (the database
 * failed or has no fence; the cause goes to onError, never to the answer).
 *
 * It alone refuses a holder already superseded when its request came; one superseded while
 * the handler runs is refused only by a fence inside the handler's own write transaction
 * (fence() with requestFence(req)).
 * @param {{query: (sql: string, params: unknown[]) => Promise<unknown>, dialect?: "postgres" | "sqlite", onError?: (err: unknown) => void}} options
 * @param {(req: import("node:http").IncomingMessage, res: import("node:http").ServerResponse) => unknown} handler
 * @returns {(req: import("node:http").IncomingMessage, res: import("node:http").ServerResponse) => Promise<void>}
 */
export function fenceMiddleware(options, handler) {
  if (typeof options?.query !== "function") throw new TypeError("query: a function (sql, params) => Promise running one statement");
  if (typeof handler !== "function") throw new TypeError("handler: the (req, res) handler to fence");
  const dialect = options.dialect ?? "postgres";
  if (dialect !== "postgres" && dialect !== "sqlite") throw new TypeError(`dialect: postgres or sqlite, not ${JSON.stringify(dialect)}`);
  const onError = options.onError ?? ((err) => console.error(`leasehold fence: check failed: ${describe(err)}`));
  return async (req, res) => {
    const read = readHeaders(req.headers);
    if ("problem" in read) return writeProblem(res, read.problem);
    try {
      await fence(options.query, read.task, read.token, { dialect });
    } catch (err) {
      if (err instanceof StaleTokenError) {
        return writeProblem(res, {
          type: PROBLEM_STALE_TOKEN, title: "Stale fencing token", status: 409, detail: err.message,
          task: err.task, token: err.token, ...(err.highest > 0 ? { highest_token: err.highest } : {}),
        });
      }
      onError(err);
      const detail = err instanceof FenceNotInstalledError ? "the resource database has no fence installed" : "the fence check could not run on the resource database";
      return writeProblem(res, { type: PROBLEM_FENCE_UNAVAILABLE, title: "Fence unavailable", status: 503, detail });
    }
    fencedRequests.set(req, { task: read.task, token: read.token });
    await handler(req, res);
  };
}

/**
 * @param {import("node:http").IncomingHttpHeaders} headers
 * @returns {{task: string, token: number} | {problem: Problem}}
 */
function readHeaders(headers) {
  // Node joins repeated headers with ", " (and keeps them in rawHeaders); a comma is in
  // neither a valid token nor, here, a task given once.
  const task = headers[HEADER_TASK.toLowerCase()];
  const token = headers[HEADER_TOKEN.toLowerCase()];
  const missing = [task === undefined && HEADER_TASK, token === undefined && HEADER_TOKEN].filter(Boolean);
  if (missing.length > 0) {
    return { problem: { type: PROBLEM_FENCE_REQUIRED, title: "Fencing token required", status: 428, detail: `${missing.join(" and ")} ${missing.length > 1 ? "headers are" : "header is"} required` } };
  }
  /** @param {string} detail */
  const invalid = (detail) => ({ problem: { type: PROBLEM_INVALID_FENCE, title: "Invalid fencing header", status: 400, detail } });
  if (Array.isArray(task) || String(task).includes(", ")) return invalid(`${HEADER_TASK} header must be given once`);
  if (String(task).trim() === "") return invalid(`${HEADER_TASK} header must not be empty`);
  if (Array.isArray(token) || String(token).includes(",")) return invalid(`${HEADER_TOKEN} header must be given once`);
  const digits = String(token).trim();
  if (!/^[0-9]+$/.test(digits) || BigInt(digits) < 1n || BigInt(digits) > BigInt(Number.MAX_SAFE_INTEGER)) {
    return invalid(`${HEADER_TOKEN} header must be a decimal integer of at least 1`);
  }
  return { task: String(task), token: Number(digits) };
}

/**
 * @typedef {{type: string, title: string, status: number, detail: string, task?: string, token?: number, highest_token?: number}} Problem
 */

/** @param {import("node:http").ServerResponse} res @param {Problem} p */
function writeProblem(res, p) {
  const body = JSON.stringify(p);
  res.writeHead(p.status, { "Content-Type": "application/problem+json", "Content-Length": Buffer.byteLength(body) });
  res.end(body);
}

/**
 * Validates a task and token as every fence does: a non-empty task, an integer token of at
 * least 1 (a bigint within Number's safe range is taken as a number).
 * @param {unknown} task
 * @param {unknown} token
 * @returns {number}
 */
function checkFence(task, token) {
  if (typeof task !== "string" || task === "") throw new TypeError("task: must be a non-empty string");
  const t = typeof token === "bigint" && token <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(token) : token;
  if (typeof t !== "number" || !Number.isSafeInteger(t) || t < 1) {
    throw new TypeError(`token: must be an integer of at least 1, not ${String(token)}`);
  }
  return t;
}

/** @param {string} text */
function highestIn(text) {
  const all = [...text.matchAll(/highest seen is (\d+)/g)];
  return all.length > 0 ? Number(all[all.length - 1][1]) : 0;
}

/**
 * The first column of the first row of a query's result, as drivers shape it: pg's
 * {rows: [...]}, an array of rows, rows as objects or arrays.
 * @param {unknown} result
 */
function firstNumber(result) {
  const r = /** @type {any} */ (result);
  const rows = Array.isArray(r) ? r : Array.isArray(r?.rows) ? r.rows : [];
  const row = rows[0];
  const v = Array.isArray(row) ? row[0] : row && typeof row === "object" ? Object.values(row)[0] : row;
  const n = Number(v);
  return Number.isSafeInteger(n) ? n : 0;
}

/** @param {unknown} err */
function describe(err) {
  return err instanceof Error ? err.message : String(err);
}
