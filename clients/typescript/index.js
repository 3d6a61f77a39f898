// leasehold client for Node >= 20: the sidecar's HTTP API over the global fetch, with no
// runtime dependencies. Plain ES modules with JSDoc types (index.d.ts declares them for
// TypeScript), so that it runs as written, with no build step. A sidecar serving on a Unix
// socket (baseUrl unix:PATH) is asked through node:http with socketPath instead, since the
// global fetch cannot dial one.
//
// Outcomes the caller must tell apart are values, not exceptions: a claim is
// {kind: "acquired"} | {kind: "held"} | {kind: "unavailable"}. Only a request the sidecar
// refuses as wrong (400, 401, 403, 404, 413, 415, 422) throws a LeaseholdError: retrying it
// would not help. A store failure, a 5xx, a network error or a timeout is "unavailable",
// never "held".

import { hostname } from "node:os";
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { request as httpRequest } from "node:http";
import { Readable } from "node:stream";

/**
 * A request the sidecar refused as wrong: bad input (400, 422, with invalidParams naming
 * the field), missing or wrong bearer token (401), a reserved task (403), an undeclared
 * task under --require-declared (404), 413, 415.
 */
export class LeaseholdError extends Error {
  /**
   * @param {string} message
   * @param {{status: number, type?: string, invalidParams?: {name: string, reason: string}[]}} info
   */
  constructor(message, info) {
    super(message);
    this.name = "LeaseholdError";
    /** @type {number} */
    this.status = info.status;
    /** @type {string | undefined} */
    this.type = info.type;
    /** @type {{name: string, reason: string}[]} */
    this.invalidParams = info.invalidParams ?? [];
  }
}

/**
 * Why a keepalive holder's signal aborted: its reason.
 * `reason` is the sidecar's (not_held, expired, held_by_other, token_mismatch, deadline,
 * shutdown) or the client's own: "deadline" when no renewal was confirmed before the local
 * deadline, "disconnected" when the stream ended without a word.
 */
export class LeaseLostError extends Error {
  /**
   * @param {string} reason
   * @param {string} detail
   */
  constructor(reason, detail) {
    super(`lease lost (${reason}): ${detail}`);
    this.name = "LeaseLostError";
    /** @type {string} */
    this.reason = reason;
    /** @type {string} */
    this.detail = detail;
  }
}

/** @returns {string} an owner identity: `<hostname>#<pid>#<random>`. */
export function defaultOwner() {
  return `${hostname()}#${process.pid}#${randomBytes(4).toString("hex")}`;
}

/**
 * @param {any} w the sidecar's lease object (snake_case)
 * @returns {import("./index.js").Lease}
 */
function toLease(w) {
  return {
    task: w.task,
    owner: w.owner,
    token: w.token,
    acquiredAt: w.acquired_at,
    renewedAt: w.renewed_at,
    expiresAt: w.expires_at,
    ttlMs: w.ttl_ms,
    ttlRemainingMs: w.ttl_remaining_ms,
    renewCount: w.renew_count,
    note: w.note ?? "",
    ...(w.hold_until ? { holdUntil: w.hold_until } : {}),
  };
}

/**
 * @param {any} w the sidecar's holder object
 * @returns {import("./index.js").Holder}
 */
function toHolder(w) {
  return {
    owner: w.owner,
    expiresAt: w.expires_at,
    ttlRemainingMs: w.ttl_remaining_ms,
    resting: w.resting === true,
    ...(w.acquired_at ? { acquiredAt: w.acquired_at } : {}),
    ...(w.hold_until ? { holdUntil: w.hold_until } : {}),
  };
}

/** The longest error text a run's outcome carries, in bytes of UTF-8 (the sidecar's bound). */
const MAX_RUN_ERROR_BYTES = 1024;

/**
 * text as a run's outcome may carry it, as the Go client's leasecore.TruncateText makes it:
 * valid UTF-8 (a lone surrogate becomes U+FFFD when encoded) without NUL (dropped), cut to at
 * most MAX_RUN_ERROR_BYTES bytes on a character boundary.
 * @param {string} text
 * @returns {string}
 */
function runErrorText(text) {
  const buf = Buffer.from(text.replaceAll("\0", ""), "utf8");
  if (buf.length <= MAX_RUN_ERROR_BYTES) return buf.toString("utf8");
  let end = MAX_RUN_ERROR_BYTES;
  // buf[end] is the first byte left out: while it continues a character, that character does
  // not fit whole, so it is left out too.
  while (end > 0 && (buf[end] & 0xc0) === 0x80) end--;
  return buf.subarray(0, end).toString("utf8");
}

/**
 * A run's outcome as a release sends it.
 * @param {import("./index.js").RunOutcome} run
 */
function toWireRun(run) {
  return {
    exit_code: run.exitCode,
    error: run.error === undefined ? undefined : runErrorText(run.error),
    duration_ms: Math.max(0, Math.floor(run.durationMs)),
    lost: run.lost,
  };
}

/**
 * What a thrown value says, as a run's error: its message (an Error's, with its cause's), or
 * its text; never empty, since an empty error with no exit status would read as no error.
 * @param {unknown} err
 */
function thrownText(err) {
  const text = describe(err);
  if (text !== "") return text;
  return err instanceof Error ? err.name || "Error" : `threw ${String(err) || "an empty value"}`;
}

/** @param {unknown} err */
function describe(err) {
  if (err instanceof Error) {
    const cause = /** @type {any} */ (err).cause;
    return cause instanceof Error ? `${err.message}: ${cause.message}` : err.message;
  }
  return String(err);
}

/**
 * A fetch that sends every request to the sidecar on the Unix socket at socketPath, through
 * node:http (whose socketPath option dials it), whatever host the URL names: Host is
 * localhost, as `curl --unix-socket PATH http://localhost/…` sends it. It answers a standard
 * Response whose body streams (a keepalive stream's events arrive as they are sent); the
 * request's signal aborts the request, or, once answered, the body.
 * @param {string} socketPath
 * @returns {typeof fetch}
 */
function unixSocketFetch(socketPath) {
  return (input, init = {}) =>
    new Promise((resolve, reject) => {
      const url = new URL(String(input));
      const signal = init.signal ?? undefined;
      if (signal?.aborted) {
        reject(signal.reason);
        return;
      }
      const req = httpRequest({
        socketPath,
        method: init.method ?? "GET",
        path: url.pathname + url.search,
        headers: { ...(/** @type {Record<string, string>} */ (init.headers ?? {})), Host: "localhost" },
      });
      const onAbort = () => req.destroy(signal?.reason ?? new Error("aborted"));
      signal?.addEventListener("abort", onAbort, { once: true });
      req.on("error", (err) => {
        signal?.removeEventListener("abort", onAbort);
        reject(err);
      });
      req.on("response", (res) => {
        res.on("close", () => signal?.removeEventListener("abort", onAbort));
        const headers = new Headers();
        for (const [k, v] of Object.entries(res.headers)) {
          for (const one of Array.isArray(v) ? v : v === undefined ? [] : [v]) headers.append(k, one);
        }
        const status = res.statusCode ?? 0;
        // A Response refuses a body with these statuses, and a HEAD answer has none.
        const bodiless = [101, 204, 205, 304].includes(status) || init.method === "HEAD";
        const body = bodiless ? null : /** @type {ReadableStream<Uint8Array>} */ (Readable.toWeb(res));
        if (bodiless) res.resume();
        resolve(new Response(body, { status, statusText: res.statusMessage, headers }));
      });
      req.end(/** @type {string | undefined} */ (init.body ?? undefined));
    });
}

/** The environment variable naming the sidecar's address, as the leasehold binary reads it. */
export const ENV_ADDR = "LEASEHOLD_ADDR";
/** The environment variable naming a file that holds the sidecar's bearer token. */
export const ENV_TOKEN_FILE = "LEASEHOLD_TOKEN_FILE";
/** The address asked when neither baseUrl nor LEASEHOLD_ADDR names one: the sidecar's default. */
export const DEFAULT_ADDR = "http://127.0.0.1:7411";

/** A token file holds one token; a larger file is refused (as the leasehold binary does). */
const MAX_TOKEN_BYTES = 4096;

/**
 * The token in a token file's content: the content without the white space around it. Its
 * errors never quote the content.
 * @param {string} path
 * @param {Buffer} raw
 * @returns {string}
 */
function parseToken(path, raw) {
  if (raw.length > MAX_TOKEN_BYTES) throw new Error(`token file ${path}: larger than ${MAX_TOKEN_BYTES} bytes; it should hold one token`);
  const tok = raw.toString("utf8").trim();
  if (tok === "") throw new Error(`token file ${path}: it is empty`);
  if (/\s/.test(tok)) throw new Error(`token file ${path}: the token must be one word without white space`);
  return tok;
}

/**
 * The bearer token of a token file, read again before every request so that a rotated
 * token (a Kubernetes Secret's volume swaps the file's content) is sent from the next request
 * on. A read that fails (the file briefly missing while it is replaced) keeps the last token
 * read: the sidecar answers 401 if that one is no longer accepted.
 */
class TokenFile {
  /** @param {string} path */
  constructor(path) {
    this.path = path;
    let raw;
    try {
      raw = readFileSync(path);
    } catch (err) {
      throw new Error(`token file ${path}: ${describe(err)}`);
    }
    /** @type {string} */
    this.token = parseToken(path, raw);
  }

  /** @returns {Promise<string>} the file's token now, or the last one read. */
  async current() {
    try {
      this.token = parseToken(this.path, await readFile(this.path));
    } catch {
      // keep the last token read
    }
    return this.token;
  }
}

export class LeaseholdClient {
  /**
   * @param {{baseUrl?: string, token?: string, tokenFile?: string, timeoutMs?: number, fetch?: typeof fetch}} [options]
   */
  constructor(options = {}) {
    // As the leasehold binary and the Go client's FromEnv: an address not given is
    // LEASEHOLD_ADDR's, else the default; a token not given is LEASEHOLD_TOKEN_FILE's.
    const env = process.env;
    let baseUrl = options.baseUrl;
    let field = "baseUrl";
    if (baseUrl === undefined) {
      baseUrl = env[ENV_ADDR] || DEFAULT_ADDR;
      field = env[ENV_ADDR] ? ENV_ADDR : field;
    }
    if (typeof baseUrl !== "string" || baseUrl === "") {
      throw new TypeError(`${field}: the sidecar's address, e.g. http://127.0.0.1:7411 or unix:/run/leasehold/leasehold.sock`);
    }
    if (baseUrl.startsWith("unix:")) {
      // unix:///abs/path and unix://rel read as paths too, as the store's sqlite: does.
      const socketPath = baseUrl.slice("unix:".length).replace(/^\/\//, "");
      if (socketPath === "" || socketPath.includes("\0")) {
        throw new TypeError(`${field}: unix: needs the socket's path, as in unix:/run/leasehold/leasehold.sock`);
      }
      if (options.fetch) throw new TypeError("fetch: not with a unix: baseUrl, which is reached through node:http");
      /** @type {string} */
      this.baseUrl = baseUrl;
      /** @private */
      this.origin = "http://localhost";
      /** @private */
      this.fetch = unixSocketFetch(socketPath);
    } else {
      this.baseUrl = baseUrl.replace(/\/+$/, "");
      this.origin = this.baseUrl;
      this.fetch = options.fetch ?? globalThis.fetch;
    }
    if (options.token !== undefined && options.tokenFile !== undefined) {
      throw new TypeError("token, tokenFile: give one or the other");
    }
    const tokenFile = options.token === undefined ? (options.tokenFile ?? (env[ENV_TOKEN_FILE] || undefined)) : undefined;
    /** @private */
    this.token = options.token;
    /** @private @type {TokenFile | undefined} */
    this.tokenFile = tokenFile === undefined ? undefined : new TokenFile(tokenFile);
    /** @private */
    this.timeoutMs = options.timeoutMs ?? 10_000;
  }

  /** @private @param {string} task @param {string} [verb] */
  path(task, verb) {
    if (typeof task !== "string" || task === "") throw new TypeError("task: required, a non-empty string");
    return `${this.origin}/v1/leases/${encodeURIComponent(task)}${verb ? "/" + verb : ""}`;
  }

  /**
   * The request headers; the bearer token is the token file's as it reads now.
   * @private
   * @param {boolean} json
   * @returns {Promise<Record<string, string>>}
   */
  async headers(json) {
    /** @type {Record<string, string>} */
    const h = { Accept: "application/json" };
    if (json) h["Content-Type"] = "application/json";
    const token = this.tokenFile ? await this.tokenFile.current() : this.token;
    if (token) h.Authorization = `Bearer ${token}`;
    return h;
  }

  /**
   * Sends one request. Resolves {status, body} for any answer the sidecar gave, or
   * {status: 0, error} when none arrived (refused, reset, timed out).
   * @private
   * @param {string} method
   * @param {string} url
   * @param {object} [body]
   * @returns {Promise<{status: number, body: any, error?: string}>}
   */
  async send(method, url, body) {
    try {
      const res = await this.fetch(url, {
        method,
        headers: await this.headers(body !== undefined),
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(this.timeoutMs),
      });
      const text = await res.text();
      let parsed = {};
      try {
        parsed = text ? JSON.parse(text) : {};
      } catch {
        parsed = { detail: text.slice(0, 200) };
      }
      return { status: res.status, body: parsed };
    } catch (err) {
      return { status: 0, body: {}, error: `sidecar at ${this.baseUrl} did not answer: ${describe(err)}` };
    }
  }

  /**
   * Throws a LeaseholdError for the answers that say the request is wrong.
   * @private
   * @param {{status: number, body: any}} r
   */
  refuseBad(r) {
    if ([400, 401, 403, 404, 405, 408, 413, 415, 422].includes(r.status)) {
      const detail = r.body.detail ?? r.body.title ?? `HTTP ${r.status}`;
      throw new LeaseholdError(detail, { status: r.status, type: r.body.type, invalidParams: r.body.invalid_params });
    }
  }

  /** @private @param {{status: number, body: any, error?: string}} r */
  unavailable(r) {
    return /** @type {const} */ ({ kind: "unavailable", detail: r.error ?? r.body.detail ?? `HTTP ${r.status}` });
  }

  /**
   * Claims task for owner. Never waits: a live lease of another owner is "held", and so is a
   * task resting in the minimum hold of a lease that ended (holder.resting), for every owner.
   * With minHoldMs, the task rests until the lease's acquisition plus minHoldMs even if the
   * lease is released or expires before then.
   * @param {string} task
   * @param {{owner: string, ttlMs?: number, note?: string, minHoldMs?: number}} options
   * @returns {Promise<import("./index.js").ClaimResult>}
   */
  async claim(task, options) {
    const body = { owner: options?.owner, ttl_ms: options?.ttlMs, note: options?.note, min_hold_ms: options?.minHoldMs };
    const r = await this.send("POST", this.path(task, "claim"), body);
    if (r.status === 200 && r.body.acquired === true) return { kind: "acquired", lease: toLease(r.body.lease) };
    if (r.status === 409 && r.body.reason === "held") {
      return { kind: "held", holder: toHolder(r.body.holder), detail: r.body.detail ?? "" };
    }
    this.refuseBad(r);
    return this.unavailable(r);
  }

  /**
   * Renews owner's lease on task; with token, only that grant. A note, when given, replaces
   * the lease's (as a claim's does); without one the lease keeps its note.
   * @param {string} task
   * @param {{owner: string, token?: number, ttlMs?: number, note?: string}} options
   * @returns {Promise<import("./index.js").RenewResult>}
   */
  async renew(task, options) {
    const body = { owner: options?.owner, token: options?.token, ttl_ms: options?.ttlMs, note: options?.note };
    const r = await this.send("POST", this.path(task, "renew"), body);
    if (r.status === 200 && r.body.renewed === true) return { kind: "renewed", lease: toLease(r.body.lease) };
    if (r.status === 409 && typeof r.body.reason === "string") {
      return { kind: "lost", reason: r.body.reason, detail: r.body.detail ?? "" };
    }
    this.refuseBad(r);
    return this.unavailable(r);
  }

  /**
   * Releases owner's lease on task; with token, only that grant. `released: false` means
   * there was nothing of owner's (with token: of that grant) to release. `holdUntil`, when
   * set, is the end of the lease's minimum hold: the task rests until then. `run`, when
   * given, is the outcome of the job run under the lease, which the history's released event
   * keeps.
   * @param {string} task
   * @param {{owner: string, token?: number, run?: import("./index.js").RunOutcome}} options
   * @returns {Promise<import("./index.js").ReleaseResult>}
   */
  async release(task, options) {
    const body = { owner: options?.owner, token: options?.token, run: options?.run && toWireRun(options.run) };
    const r = await this.send("POST", this.path(task, "release"), body);
    if (r.status === 200) {
      return { kind: "released", released: r.body.released === true, ...(r.body.hold_until ? { holdUntil: r.body.hold_until } : {}) };
    }
    this.refuseBad(r);
    return this.unavailable(r);
  }

  /**
   * The current lease on task, or null when it is free. Throws LeaseholdError when the
   * sidecar cannot answer (a read has no "held" to confuse it with).
   * @param {string} task
   * @returns {Promise<import("./index.js").Lease | null>}
   */
  async get(task) {
    const r = await this.send("GET", this.path(task));
    if (r.status === 200) return r.body.held ? toLease(r.body.lease) : null;
    this.refuseBad(r);
    throw new LeaseholdError(this.unavailable(r).detail, { status: r.status, type: r.body.type });
  }

  /**
   * Opens a keepalive stream: the sidecar renews the lease for as long as it stays open.
   * On "acquired", the holder's signal aborts when the lease is lost. With minHoldMs, the
   * task rests until the lease's acquisition plus minHoldMs, however early the stream ends.
   * @param {string} task
   * @param {{owner?: string, ttlMs?: number, note?: string, waitMs?: number, minHoldMs?: number}} [options]
   * @returns {Promise<import("./index.js").KeepaliveResult>}
   */
  async keepalive(task, options = {}) {
    const q = new URLSearchParams();
    if (options.owner !== undefined) q.set("owner", options.owner);
    if (options.ttlMs !== undefined) q.set("ttl_ms", String(options.ttlMs));
    if (options.note !== undefined) q.set("note", options.note);
    if (options.minHoldMs !== undefined) q.set("min_hold_ms", String(options.minHoldMs));
    if (options.waitMs !== undefined) q.set("wait_ms", String(options.waitMs));
    const url = `${this.path(task, "keepalive")}?${q}`;
    const conn = new AbortController();
    // The answer's headers must come within the timeout (plus any wait); the body is a
    // stream watched by the holder's own deadline.
    const headersTimer = setTimeout(
      () => conn.abort(new Error(`no answer within ${this.timeoutMs + (options.waitMs ?? 0)} ms`)),
      this.timeoutMs + (options.waitMs ?? 0),
    );
    let res;
    try {
      res = await this.fetch(url, {
        headers: { ...(await this.headers(false)), Accept: "text/event-stream" },
        signal: conn.signal,
      });
    } catch (err) {
      return this.unavailable({ status: 0, body: {}, error: `sidecar at ${this.baseUrl} did not answer: ${describe(err)}` });
    } finally {
      clearTimeout(headersTimer);
    }
    if (res.status !== 200 || !res.body) {
      let body = {};
      try {
        body = await res.json();
      } catch {
        // not JSON: the status says it all
      }
      const r = { status: res.status, body: /** @type {any} */ (body) };
      if (r.status === 409 && r.body.reason === "held") {
        return { kind: "held", holder: toHolder(r.body.holder), detail: r.body.detail ?? "" };
      }
      this.refuseBad(r);
      return this.unavailable(r);
    }
    const events = sseEvents(res.body);
    let first;
    try {
      first = await events.next();
    } catch (err) {
      conn.abort();
      return this.unavailable({ status: 0, body: {}, error: `keepalive stream broke: ${describe(err)}` });
    }
    if (first.done || first.value.event !== "acquired") {
      conn.abort();
      return this.unavailable({ status: 0, body: {}, error: "keepalive stream ended before the lease was acquired" });
    }
    const holder = new KeepaliveHolder(this, task, toLease(JSON.parse(first.value.data)), events, conn);
    return { kind: "acquired", holder };
  }

  /**
   * Runs fn while holding task through a keepalive stream: fn gets the lease and a signal
   * that aborts when the lease is lost. When fn settles, the lease is released with the
   * run's outcome (exit_code 0 when fn resolved, its error when it rejected, lost when the
   * signal had aborted, and the duration), which the history's released event keeps; fn's
   * rejection is passed on after the release.
   *
   * With oncePerMs (the scheduled-job mode, exclusive with waitMs and minHoldMs), the lease
   * is claimed with a minimum hold of half the period, so that of the replicas whose
   * schedulers fire the job within half a period of each other one runs it; the others
   * resolve {kind: "skipped"}, saying who ran it, when, whether it still runs, and when the
   * task is free.
   * @template T
   * @param {string} task
   * @param {(lease: import("./index.js").Lease, signal: AbortSignal) => Promise<T> | T} fn
   * @param {{owner?: string, ttlMs?: number, note?: string, waitMs?: number, minHoldMs?: number, oncePerMs?: number}} [options]
   * @returns {Promise<import("./index.js").RunResult<T> | import("./index.js").OncePerResult<T>>}
   */
  async run(task, fn, options = {}) {
    if (typeof fn !== "function") {
      throw new TypeError(
        "fn: run(task, fn, options) takes the function to run as its second argument; " +
          "for the wallet seed's run(taskName, ownerId, ttlMs, body), use new LeasedMonitorTask(client).run",
      );
    }
    if (options === null || typeof options !== "object") throw new TypeError("options: an object ({owner, ttlMs, note, waitMs, minHoldMs, oncePerMs})");
    const { oncePerMs, ...rest } = options;
    /** @type {{owner?: string, ttlMs?: number, note?: string, waitMs?: number, minHoldMs?: number}} */
    const ka = { owner: defaultOwner(), ...rest };
    if (oncePerMs !== undefined) {
      if (typeof oncePerMs !== "number" || !Number.isFinite(oncePerMs) || oncePerMs < 2) {
        throw new TypeError(`oncePerMs: the period in ms, at least 2 (the minimum hold is half of it), got ${oncePerMs}`);
      }
      if (rest.waitMs !== undefined) throw new TypeError("oncePerMs, waitMs: exclusive; a replica that finds this period's job taken is skipped, not kept waiting");
      if (rest.minHoldMs !== undefined) throw new TypeError("oncePerMs, minHoldMs: exclusive; oncePerMs holds the task for half the period");
      ka.minHoldMs = Math.floor(oncePerMs / 2);
    }
    const k = await this.keepalive(task, ka);
    if (k.kind === "held" && oncePerMs !== undefined) return skipped(k);
    if (k.kind !== "acquired") return k;
    const { holder } = k;
    const start = performance.now();
    /** @type {import("./index.js").RunOutcome} */
    let outcome = { durationMs: 0 };
    try {
      const value = await fn(holder.lease, holder.signal);
      const lost = holder.signal.aborted;
      outcome = { exitCode: 0, durationMs: performance.now() - start, ...(lost ? { lost } : {}) };
      return { kind: "ran", value, lease: holder.lease, lost };
    } catch (err) {
      const lost = holder.signal.aborted;
      outcome = { error: thrownText(err), durationMs: performance.now() - start, ...(lost ? { lost } : {}) };
      throw err;
    } finally {
      await holder.release({ run: outcome });
    }
  }
}

/**
 * A held answer to a scheduled-job run, as its skipped result.
 * @param {import("./index.js").Held} held
 * @returns {import("./index.js").Skipped}
 */
function skipped(held) {
  const h = held.holder;
  return {
    kind: "skipped",
    runBy: h.owner,
    ...(h.acquiredAt ? { startedAt: h.acquiredAt } : {}),
    running: !h.resting,
    freeAt: h.expiresAt,
    holder: h,
    detail: held.detail,
  };
}

/**
 * Parses a text/event-stream body into {event, data} records; comments (pings) are skipped.
 * @param {ReadableStream<Uint8Array>} body
 * @returns {AsyncGenerator<{event: string, data: string}>}
 */
async function* sseEvents(body) {
  let buf = "";
  let event = "";
  /** @type {string[]} */
  let data = [];
  // The cast: lib.dom types TextDecoderStream as taking any BufferSource.
  const text = body.pipeThrough(/** @type {TransformStream<Uint8Array, string>} */ (/** @type {unknown} */ (new TextDecoderStream())));
  for await (const chunk of text) {
    buf += chunk;
    let nl;
    while ((nl = buf.search(/\r\n|\r|\n/)) >= 0) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + (buf.startsWith("\r\n", nl) ? 2 : 1));
      if (line === "") {
        if (data.length > 0 || event !== "") yield { event: event || "message", data: data.join("\n") };
        event = "";
        data = [];
      } else if (line.startsWith(":")) {
        // a ping
      } else {
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? "" : line.slice(colon + 1);
        if (value.startsWith(" ")) value = value.slice(1);
        if (field === "event") event = value;
        else if (field === "data") data.push(value);
      }
    }
  }
}

/**
 * A lease held through an open keepalive stream. `signal` aborts (with a LeaseLostError)
 * when the lease is lost: the sidecar says `lost`, or `released` (shutdown, or a release of
 * this grant by another call through the same sidecar), the stream ends,
 * or the local deadline passes (monotonic time of the last acquired/renewed event plus its
 * ttl_remaining_ms) with no newer event. release() ends it on purpose; the signal then
 * stays unaborted.
 */
export class KeepaliveHolder {
  /**
   * @param {LeaseholdClient} client
   * @param {string} task
   * @param {import("./index.js").Lease} lease
   * @param {AsyncGenerator<{event: string, data: string}>} events
   * @param {AbortController} conn
   */
  constructor(client, task, lease, events, conn) {
    /** @private */
    this.client = client;
    /** @private */
    this.task = task;
    /** @private */
    this.conn = conn;
    /** @private */
    this.lost = new AbortController();
    /** @private */
    this.releasing = false;
    /** @private @type {Promise<void> | undefined} */
    this.released = undefined;
    /** @private @type {ReturnType<typeof setTimeout> | undefined} */
    this.deadline = undefined;
    /** The latest lease the sidecar confirmed. @type {import("./index.js").Lease} */
    this.lease = lease;
    this.armDeadline(lease);
    /** @private */
    this.reading = this.read(events);
  }

  /** Aborts, with a LeaseLostError as its reason, when the lease is lost. */
  get signal() {
    return this.lost.signal;
  }

  /** The fencing token of the grant held. */
  get token() {
    return this.lease.token;
  }

  /** @private @param {import("./index.js").Lease} lease */
  armDeadline(lease) {
    clearTimeout(this.deadline);
    // setTimeout runs on the monotonic clock, so a wall-clock jump cannot move it.
    this.deadline = setTimeout(
      () => this.lose("deadline", `no renewal confirmed within ${lease.ttlRemainingMs} ms of the last`),
      lease.ttlRemainingMs,
    );
  }

  /** @private @param {string} reason @param {string} detail */
  lose(reason, detail) {
    clearTimeout(this.deadline);
    if (this.releasing || this.lost.signal.aborted) return;
    this.lost.abort(new LeaseLostError(reason, detail));
    this.conn.abort();
  }

  /** @private @param {AsyncGenerator<{event: string, data: string}>} events */
  async read(events) {
    try {
      for await (const ev of events) {
        let data = {};
        try {
          data = JSON.parse(ev.data);
        } catch {
          // an event with no JSON: its name is what counts
        }
        const d = /** @type {any} */ (data);
        if (ev.event === "renewed") {
          this.lease = toLease(d);
          this.armDeadline(this.lease);
        } else if (ev.event === "lost") {
          this.lose(d.reason ?? "lost", d.detail ?? "the sidecar reported the lease lost");
          return;
        } else if (ev.event === "released") {
          // reason shutdown: the sidecar is stopping; release: the lease was released
          // through this sidecar by another call than this holder's release().
          this.lose(d.reason ?? "released", `the sidecar released the lease (${d.reason ?? "released"})`);
          return;
        }
      }
      this.lose("disconnected", "the keepalive stream ended");
    } catch (err) {
      this.lose("disconnected", `the keepalive stream broke: ${describe(err)}`);
    }
  }

  /**
   * Releases the grant, owner- and token-checked (with run, the outcome of the job run under
   * it, which the history's released event keeps), then hangs up, so the task is free (or
   * resting in its minimum hold) when this resolves if the sidecar answers; if it does not,
   * the hang-up releases it. Idempotent (a later call's run is not sent); never throws.
   * @param {{run?: import("./index.js").RunOutcome}} [options]
   * @returns {Promise<void>}
   */
  release(options = {}) {
    this.released ??= (async () => {
      // From here on a loss is none: the release ends the lease on purpose.
      this.releasing = true;
      clearTimeout(this.deadline);
      try {
        const run = options.run;
        await this.client.release(this.task, { owner: this.lease.owner, token: this.lease.token, ...(run ? { run } : {}) });
      } catch {
        // The hang-up releases it too; the ttl is the backstop.
      }
      this.conn.abort();
      await this.reading.catch(() => undefined);
    })();
    return this.released;
  }
}

/** The lock name the observability console's pruner asks for. */
export const PRUNE_LOCK_KEY = "telescope:prune";

/** The shortest ttl leasehold grants, in ms. */
export const MIN_TTL_MS = 100;
/** The longest ttl leasehold grants, in ms (24 h); a declared task's max_ttl may lower it. */
export const MAX_TTL_MS = 86_400_000;

/**
 * A requested ttl as leasehold grants it: rounded to whole ms and clamped into
 * [MIN_TTL_MS, max]. NaN (no ttl at all) is null.
 * @param {number} ttlMs
 * @param {number} [max]
 * @returns {number | null}
 */
function clampTtl(ttlMs, max = MAX_TTL_MS) {
  if (typeof ttlMs !== "number" || Number.isNaN(ttlMs)) return null;
  return Math.min(Math.max(Math.round(ttlMs), MIN_TTL_MS), max);
}

/**
 * Backs the observability console seed's prune-lock seam (TelescopePruneLock) with leasehold:
 * acquire({key, owner, ttlMs}) claims the task `key` once, without waiting.
 *
 * ttlMs is clamped into what leasehold grants (100 ms to 24 h, or the task's declared
 * max_ttl when that is lower): the seam asks for no precision, and its pruner asks for three
 * prune intervals (72 h for a daily prune), which leasehold would refuse, leaving the pruner
 * to fail open on every tick. A lease then lasts min(ttlMs, 24 h or max_ttl), or at least
 * 100 ms; expiresAtMs says which. A declared max_ttl is learnt from the sidecar the first time
 * a claim is refused for its ttl, and remembered per key.
 *
 * acquire never throws: anything that is not a clear "another owner holds it" is
 * "unavailable" (the pruner fails open on it). lease.release() is idempotent, never throws,
 * and releases only this grant (owner and fencing token), never a later owner's.
 * @param {LeaseholdClient} client
 * @returns {import("./index.js").PruneLock}
 */
export function leaseholdPruneLock(client) {
  /** @type {Map<string, number>} a key's declared max_ttl, once a claim met it */
  const maxTtl = new Map();
  /**
   * @param {string} key
   * @param {string} owner
   * @param {number} ttlMs
   */
  const claim = (key, owner, ttlMs) => client.claim(key, { owner, ttlMs, note: "prune lock" });
  return {
    async acquire(request) {
      try {
        const { key, owner, ttlMs } = request;
        const ttl = clampTtl(ttlMs, maxTtl.get(key));
        if (ttl === null) return { acquired: false, reason: "unavailable", detail: `ttlMs: want a number of milliseconds, got ${ttlMs}` };
        let r;
        try {
          r = await claim(key, owner, ttl);
        } catch (err) {
          // Above the task's declared max_ttl: 422 naming ttl_ms. Ask the declaration once,
          // then claim within it.
          const max = isTtlRefusal(err) ? await declaredMaxTtl(client, key) : undefined;
          if (max === undefined || max >= ttl) throw err;
          maxTtl.set(key, max);
          r = await claim(key, owner, Math.min(ttl, max));
        }
        if (r.kind === "held") return { acquired: false, reason: "held", detail: r.detail };
        if (r.kind === "unavailable") return { acquired: false, reason: "unavailable", detail: r.detail };
        const { lease } = r;
        /** @type {Promise<void> | undefined} */
        let done;
        return {
          acquired: true,
          lease: {
            key,
            owner: lease.owner,
            token: lease.token,
            expiresAtMs: Date.parse(lease.expiresAt),
            release() {
              done ??= client.release(key, { owner: lease.owner, token: lease.token }).then(
                () => undefined,
                () => undefined,
              );
              return done;
            },
          },
        };
      } catch (err) {
        return { acquired: false, reason: "unavailable", detail: describe(err) };
      }
    },
  };
}

/** @param {unknown} err */
function isTtlRefusal(err) {
  return err instanceof LeaseholdError && err.status === 422 && err.invalidParams.some((p) => p.name === "ttl_ms");
}

/**
 * The max_ttl_ms task declares, or undefined when it declares none or the sidecar does not say.
 * @param {LeaseholdClient} client
 * @param {string} task
 * @returns {Promise<number | undefined>}
 */
async function declaredMaxTtl(client, task) {
  const c = /** @type {any} */ (client);
  const r = await c.send("GET", `${c.origin}/v1/tasks/${encodeURIComponent(task)}`);
  const max = r.status === 200 ? r.body.max_ttl_ms : undefined;
  return Number.isInteger(max) && max >= MIN_TTL_MS ? max : undefined;
}

export * from "./fence.js";
export * from "./seed.js";
