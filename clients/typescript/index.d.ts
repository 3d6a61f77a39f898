// Type declarations for index.js (hand-written: the client is plain JavaScript with JSDoc so
// that Node runs it with no build step).

/** A lease as the sidecar reports it; times are RFC 3339 UTC strings with milliseconds. */
export interface Lease {
  readonly task: string;
  readonly owner: string;
  /** The fencing token: rises with each new grant of the task, never repeats. */
  readonly token: number;
  readonly acquiredAt: string;
  readonly renewedAt: string;
  readonly expiresAt: string;
  readonly ttlMs: number;
  readonly ttlRemainingMs: number;
  readonly renewCount: number;
  readonly note: string;
  /**
   * The end of the lease's minimum hold (a claim's `minHoldMs`); absent when it has none. The
   * task is granted to nobody before it, its owner included, even after a release or expiry.
   */
  readonly holdUntil?: string;
}

/**
 * Who holds a task another owner asked for: the owner of a live lease, or, with `resting`,
 * the owner of a lease that ended (released or expired) inside its minimum hold, which keeps
 * the task from every claimant until `holdUntil`.
 */
export interface Holder {
  readonly owner: string;
  /** When the task may next be granted, as far as the store knows now. */
  readonly expiresAt: string;
  readonly ttlRemainingMs: number;
  /** When the holder's lease was granted. */
  readonly acquiredAt?: string;
  /** The end of the holder's minimum hold; absent when it has none. */
  readonly holdUntil?: string;
  /** The holder's lease has ended and its minimum hold keeps the task resting. */
  readonly resting: boolean;
}

/** Another owner holds a live lease, or the task rests in a minimum hold: a healthy refusal. */
export interface Held {
  readonly kind: "held";
  readonly holder: Holder;
  readonly detail: string;
}

/** The sidecar or its store could not answer: never reported as held. */
export interface Unavailable {
  readonly kind: "unavailable";
  readonly detail: string;
}

export type ClaimResult = { readonly kind: "acquired"; readonly lease: Lease } | Held | Unavailable;

/** `reason`: not_held, expired, held_by_other or token_mismatch. */
export type RenewResult =
  | { readonly kind: "renewed"; readonly lease: Lease }
  | { readonly kind: "lost"; readonly reason: string; readonly detail: string }
  | Unavailable;

/**
 * `released: false`: there was nothing of the owner's to release. `holdUntil`: the end of the
 * released lease's minimum hold when it has not passed; the task rests until then.
 */
export type ReleaseResult =
  | { readonly kind: "released"; readonly released: boolean; readonly holdUntil?: string }
  | Unavailable;

/**
 * What a job run under a lease did, sent with its release (`run()` sends it); the history's
 * released event keeps it. `exitCode` (0–255) or `error` (at most 1024 bytes of UTF-8 are
 * sent) says how it ended; `lost`, that the lease was lost while it ran.
 */
export interface RunOutcome {
  readonly exitCode?: number;
  readonly error?: string;
  readonly durationMs: number;
  readonly lost?: boolean;
}

export type KeepaliveResult = { readonly kind: "acquired"; readonly holder: KeepaliveHolder } | Held | Unavailable;

/** fn ran: its value and the lease; `lost`: the signal had aborted by the time fn settled. */
export interface Ran<T> {
  readonly kind: "ran";
  readonly value: T;
  readonly lease: Lease;
  readonly lost: boolean;
}

export type RunResult<T> = Ran<T> | Held | Unavailable;

/**
 * A scheduled-job run (`oncePerMs`) that found this period's job another replica's, and did
 * not call fn: a healthy outcome, as held is.
 */
export interface Skipped {
  readonly kind: "skipped";
  /** Who ran it, or runs it: the holder's owner. */
  readonly runBy: string;
  /** When that run started: the holder's lease's acquisition. */
  readonly startedAt?: string;
  /** true: the run is still going (a live lease); false: it is done (the task rests). */
  readonly running: boolean;
  /** When the task may next be granted: the live lease's expiry, or the end of the hold. */
  readonly freeAt: string;
  readonly holder: Holder;
  readonly detail: string;
}

/** run() with `oncePerMs`: never held, skipped instead. */
export type OncePerResult<T> = Ran<T> | Skipped | Unavailable;

export interface ClientOptions {
  /**
   * The sidecar's address, e.g. http://127.0.0.1:7411, or unix:PATH for a sidecar serving on a
   * Unix socket (asked through node:http with socketPath, not fetch). Not given: the
   * environment's `LEASEHOLD_ADDR`, else http://127.0.0.1:7411, as the leasehold binary does.
   */
  baseUrl?: string;
  /** Sent as `Authorization: Bearer <token>` when set. */
  token?: string;
  /**
   * A file holding the bearer token (one word; white space around it is ignored), read at
   * construction (a missing or empty file throws) and again before every request, so that a
   * rotated token is sent from the next request on. With neither token nor tokenFile, the
   * environment's `LEASEHOLD_TOKEN_FILE` when set; else no token.
   */
  tokenFile?: string;
  /** Per-request timeout (for a keepalive stream: until its headers); default 10000. */
  timeoutMs?: number;
  /** A fetch to use instead of the global one; not with a unix: baseUrl. */
  fetch?: typeof fetch;
}

export interface KeepaliveOptions {
  /** Default: the sidecar makes one (run() makes `<hostname>#<pid>#<random>`). */
  owner?: string;
  ttlMs?: number;
  note?: string;
  /** Wait up to this long for a held task instead of answering held at once. */
  waitMs?: number;
  /**
   * The lease's minimum hold in ms (1 ms to 31 days): however early the stream ends, the task
   * rests, refused to every claimant, until the lease's acquisition plus this.
   */
  minHoldMs?: number;
}

/**
 * run()'s scheduled-job mode: the job runs at most once per `oncePerMs` across the replicas
 * whose schedulers fire it. The lease is claimed with a minimum hold of half the period
 * (whole ms), so a replica that fires within half a period after the one that ran resolves
 * `skipped`. Exclusive with `waitMs` and `minHoldMs`.
 */
export interface OncePerOptions {
  owner?: string;
  ttlMs?: number;
  note?: string;
  /** The period in ms, at least 2. */
  oncePerMs: number;
  waitMs?: never;
  minHoldMs?: never;
}

export interface ClaimOptions {
  owner: string;
  ttlMs?: number;
  note?: string;
  /** The lease's minimum hold in ms (1 ms to 31 days); see KeepaliveOptions.minHoldMs. */
  minHoldMs?: number;
}

export class LeaseholdError extends Error {
  readonly status: number;
  readonly type: string | undefined;
  readonly invalidParams: { name: string; reason: string }[];
}

export class LeaseLostError extends Error {
  /** not_held, expired, held_by_other, token_mismatch, deadline, shutdown, disconnected. */
  readonly reason: string;
  readonly detail: string;
}

export class KeepaliveHolder {
  /** The latest lease the sidecar confirmed. */
  readonly lease: Lease;
  /** The fencing token of the grant held. */
  readonly token: number;
  /** Aborts, with a LeaseLostError as its reason, when the lease is lost. */
  readonly signal: AbortSignal;
  /**
   * Release this grant (with `run`, the outcome of the job run under it), then hang up;
   * idempotent, never throws.
   */
  release(options?: { run?: RunOutcome }): Promise<void>;
}

/** `LEASEHOLD_ADDR`: the environment variable naming the sidecar's address. */
export declare const ENV_ADDR = "LEASEHOLD_ADDR";
/** `LEASEHOLD_TOKEN_FILE`: the environment variable naming the bearer token's file. */
export declare const ENV_TOKEN_FILE = "LEASEHOLD_TOKEN_FILE";
/** The address asked when neither baseUrl nor `LEASEHOLD_ADDR` names one. */
export declare const DEFAULT_ADDR = "http://127.0.0.1:7411";

export class LeaseholdClient {
  /** With no options, the sidecar `LEASEHOLD_ADDR` names, with the token of `LEASEHOLD_TOKEN_FILE`. */
  constructor(options?: ClientOptions);
  readonly baseUrl: string;
  claim(task: string, options: ClaimOptions): Promise<ClaimResult>;
  /** A note, when given, replaces the lease's; without one the lease keeps its note. */
  renew(task: string, options: { owner: string; token?: number; ttlMs?: number; note?: string }): Promise<RenewResult>;
  /** With `run`, the outcome of the job run under the lease, which the history keeps. */
  release(task: string, options: { owner: string; token?: number; run?: RunOutcome }): Promise<ReleaseResult>;
  /** The current lease, or null when the task is free; throws LeaseholdError when it cannot tell. */
  get(task: string): Promise<Lease | null>;
  keepalive(task: string, options?: KeepaliveOptions): Promise<KeepaliveResult>;
  /**
   * Runs fn under the lease and releases it when fn settles, with the run's outcome (exit code
   * 0, or fn's error; lost; duration), kept in the history; fn's rejection is passed on.
   * With `oncePerMs`: the scheduled-job mode, where another replica's run is `skipped`.
   */
  run<T>(
    task: string,
    fn: (lease: Lease, signal: AbortSignal) => Promise<T> | T,
    options: OncePerOptions,
  ): Promise<OncePerResult<T>>;
  run<T>(
    task: string,
    fn: (lease: Lease, signal: AbortSignal) => Promise<T> | T,
    options?: KeepaliveOptions & { oncePerMs?: never },
  ): Promise<RunResult<T>>;
}

/** `<hostname>#<pid>#<random>`. */
export function defaultOwner(): string;

// The observability console seed's prune-lock seam (TelescopePruneLock), structurally.

export declare const PRUNE_LOCK_KEY = "telescope:prune";

/** The shortest ttl leasehold grants (100 ms). */
export declare const MIN_TTL_MS = 100;
/** The longest ttl leasehold grants (24 h); a declared task's max_ttl may lower it. */
export declare const MAX_TTL_MS = 86400000;

export interface PruneLease {
  readonly key: string;
  readonly owner: string;
  /** Epoch ms after which the lease may be granted to somebody else. */
  readonly expiresAtMs: number;
  /** leasehold's fencing token for this grant. */
  readonly token: number;
  /** Idempotent, never throws, never releases a later owner's grant. */
  release(): Promise<void>;
}

export type PruneLockResult =
  | { readonly acquired: true; readonly lease: PruneLease }
  | { readonly acquired: false; readonly reason: "held" | "unavailable"; readonly detail?: string };

export interface PruneLockRequest {
  readonly key: string;
  readonly owner: string;
  /**
   * How long the lease should survive without a release. leasehold's adapter clamps it into
   * what leasehold grants: at least MIN_TTL_MS, at most MAX_TTL_MS or the task's declared
   * max_ttl (the seam asks for no precision); the lease's expiresAtMs says what was granted.
   */
  readonly ttlMs: number;
}

export interface PruneLock {
  acquire(request: PruneLockRequest): Promise<PruneLockResult>;
}

/**
 * A prune lock backed by leasehold: acquire never throws and never waits, and clamps the
 * requested ttl into leasehold's range (a daily prune's 72 h becomes 24 h, or the task's
 * declared max_ttl; 30 ms becomes 100 ms).
 */
export function leaseholdPruneLock(client: LeaseholdClient): PruneLock;

// The wallet toolkit seed's monitor-lease API, as the seed is written, over the sidecar.

/** The seed's monitor_lease row, from a leasehold lease (and its fencing token). */
export interface TableMonitorLease {
  /** When the lease was granted. */
  created_at: Date;
  /** When it was last renewed (or granted). */
  updated_at: Date;
  taskName: string;
  ownerId: string;
  expiresAt: Date;
  renewCount: number;
  note?: string;
  /** leasehold's fencing token for this grant. */
  token: number;
}

export interface MonitorLeaseClaim {
  taskName: string;
  ownerId: string;
  ttlMs: number;
  note?: string;
}

export interface MonitorLeaseRelease {
  taskName: string;
  ownerId: string;
}

export interface MonitorLeaseRenew {
  taskName: string;
  ownerId: string;
  ttlMs: number;
  note?: string;
}

export interface MonitorLeaseResult {
  acquired: boolean;
  lease?: TableMonitorLease;
}

/** The sidecar or its store could not answer: the lease's state is unknown, not "held". */
export class LeaseUnavailableError extends Error {
  readonly op: string;
  readonly taskName: string;
  readonly detail: string;
}

/**
 * Succeeds iff the task is free, its lease expired, or ownerId holds it already. `now` is
 * accepted for the seed's signature; the store's clock decides expiry.
 */
export function tryClaimLease(client: LeaseholdClient, claim: MonitorLeaseClaim, now?: Date): Promise<MonitorLeaseResult>;
/** `acquired: false` when there is no lease, it is another owner's, or it has expired. */
export function renewLease(client: LeaseholdClient, renew: MonitorLeaseRenew, now?: Date): Promise<MonitorLeaseResult>;
/** false (a no-op) when ownerId holds no lease on the task. */
export function releaseLease(client: LeaseholdClient, release: MonitorLeaseRelease): Promise<boolean>;

/**
 * Wraps a long-running monitor task body in acquire / renew (setInterval at ttlMs × 0.4) /
 * release, logging lease activity with console.log.
 */
export class LeasedMonitorTask {
  constructor(clientOrOptions?: LeaseholdClient | ClientOptions);
  readonly client: LeaseholdClient;
  /**
   * `{ran: true}` when the lease was acquired and body completed (body's error is re-thrown
   * after the cleanup); `{ran: false}` when another owner holds a live lease. body's signal
   * aborts when a renewal is refused.
   */
  run(taskName: string, ownerId: string, ttlMs: number, body: (signal: AbortSignal) => Promise<void>): Promise<{ ran: boolean }>;
}

// Fencing at the resource: the checks a job's own database and HTTP resources run.

export declare const HEADER_TASK = "Leasehold-Task";
export declare const HEADER_TOKEN = "Leasehold-Token";
export declare const PROBLEM_STALE_TOKEN = "urn:leasehold:problem:stale-token";
export declare const PROBLEM_FENCE_REQUIRED = "urn:leasehold:problem:fence-required";
export declare const PROBLEM_INVALID_FENCE = "urn:leasehold:problem:invalid-fence";
export declare const PROBLEM_FENCE_UNAVAILABLE = "urn:leasehold:problem:fence-unavailable";
/** PostgreSQL's SQLSTATE for a stale token. */
export declare const STALE_SQLSTATE = "LH001";

/** Runs one statement in the caller's transaction: `(sql, params) => client.query(sql, params)`. */
export type FenceQuery = (sql: string, params: unknown[]) => Promise<unknown>;

export interface FenceOptions {
  /** "postgres" (the default) or "sqlite". */
  dialect?: "postgres" | "sqlite";
}

/** A newer holder has written: the write must not happen; roll the transaction back. */
export class StaleTokenError extends Error {
  readonly task: string;
  readonly token: number;
  /** The highest token seen for the task, or 0 when it could not be read. */
  readonly highest: number;
}

/** The database has no fence: apply `leasehold fence sql` or run `leasehold fence install`. */
export class FenceNotInstalledError extends Error {}

/**
 * Inside the writing transaction: records a higher token, accepts an equal one, refuses a
 * lower one (StaleTokenError). Resolves the token accepted.
 */
export function fence(query: FenceQuery, task: string, token: number | bigint, options?: FenceOptions): Promise<number>;

/** The Leasehold-Task and Leasehold-Token headers for a request to a fenced HTTP resource. */
export function fenceHeaders(task: string, token: number | bigint): Record<string, string>;

/** The task and token fenceMiddleware accepted for req; undefined outside it. */
export function requestFence(req: object): { task: string; token: number } | undefined;

export interface FenceMiddlewareOptions extends FenceOptions {
  /** Runs the check as one statement of its own (on a pool, so it commits). */
  query: FenceQuery;
  /** Why a check could not run (answered only as 503); default console.error. */
  onError?: (err: unknown) => void;
}

/** What fenceMiddleware reads of node:http's IncomingMessage (declared here, so no @types/node is needed). */
export interface FencedRequest {
  readonly headers: Readonly<Record<string, string | string[] | undefined>>;
}

/** What fenceMiddleware writes with of node:http's ServerResponse. */
export interface FencedResponse {
  writeHead(status: number, headers: Record<string, string | number>): unknown;
  end(body?: string): unknown;
}

/**
 * Fences a node:http handler: a stale token is a 409 stale-token problem, a missing header
 * 428, a malformed one 400, a database failure 503; the handler runs only for an accepted token.
 */
export function fenceMiddleware<Req extends FencedRequest, Res extends FencedResponse>(
  options: FenceMiddlewareOptions,
  handler: (req: Req, res: Res) => unknown,
): (req: Req, res: Res) => Promise<void>;
