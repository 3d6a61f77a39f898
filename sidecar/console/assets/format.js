// Pure helpers of the console: durations and times in words, the server's
// clock as seen from the browser, and the reconnection backoff.

/** A duration in ms as a short readable text: "850 ms", "42 s", "3 min 05 s", "2 h 10 min", "30 d". */
export function formatDuration(ms) {
  if (!Number.isFinite(ms)) return '—';
  if (ms < 0) ms = 0;
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return s % 60 === 0 ? `${m} min` : `${m} min ${String(s % 60).padStart(2, '0')} s`;
  const h = Math.floor(m / 60);
  if (h < 48) return m % 60 === 0 ? `${h} h` : `${h} h ${String(m % 60).padStart(2, '0')} min`;
  const d = Math.floor(h / 24);
  return h % 24 === 0 ? `${d} d` : `${d} d ${h % 24} h`;
}

/**
 * What a countdown shows with ms left: whole seconds, rounded up so that it
 * shows 0 s only at expiry; under an hour the seconds always show, so that
 * it visibly ticks ("2 min 00 s", "1 min 59 s").
 */
export function formatCountdown(ms) {
  if (ms <= 0) return 'expired';
  const s = Math.ceil(ms / 1000);
  if (s >= 60 && s < 3600) return `${Math.floor(s / 60)} min ${String(s % 60).padStart(2, '0')} s`;
  return formatDuration(s * 1000);
}

/**
 * The server's clock minus the browser's, in ms, from a response's Date
 * header (whole seconds) and the browser's clock before and after the
 * request: the server read its clock somewhere in [sent, received], and
 * the header drops the fraction of its second, so the estimate is the
 * header plus half a second, against the middle of the round trip.
 * Returns undefined when the header is missing or unreadable.
 */
export function clockOffset(dateHeader, sentMs, receivedMs) {
  if (!dateHeader) return undefined;
  const server = Date.parse(dateHeader);
  if (Number.isNaN(server)) return undefined;
  return server + 500 - (sentMs + receivedMs) / 2;
}

/** A time as the browser's locale writes it: the time of day when it is today, else date and time. */
export function formatTime(iso, nowMs, locale) {
  const t = new Date(iso);
  if (Number.isNaN(t.getTime())) return iso ?? '—';
  const now = new Date(nowMs);
  const sameDay = t.toDateString() === now.toDateString();
  const opts = sameDay
    ? { hour: '2-digit', minute: '2-digit', second: '2-digit' }
    : { year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit' };
  return new Intl.DateTimeFormat(locale, opts).format(t);
}

/** How long ago a time was, seen from serverNowMs: "12 s ago", "in 3 s" for a time ahead. */
export function formatAgo(iso, serverNowMs) {
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return '';
  const d = serverNowMs - t;
  // The server's clock is known to about half a second (see clockOffset).
  if (d > -1500 && d < 1000) return 'just now';
  if (d < 0) return `in ${formatDuration(-d)}`;
  return `${formatDuration(d)} ago`;
}

/** The wait before reconnection attempt n (0, 1, …): doubling from 500 ms up to 30 s, with jitter in [0.5, 1). */
export function backoff(attempt, random = Math.random) {
  const base = Math.min(30000, 500 * 2 ** Math.min(attempt, 16));
  return Math.round(base * (0.5 + random() / 2));
}

/** The words and symbol of a history event kind: never colour alone. */
export const eventKinds = {
  acquired: { icon: '▶', label: 'acquired' },
  released: { icon: '■', label: 'released' },
  expired: { icon: '⊘', label: 'expired' },
  taken_over: { icon: '⇄', label: 'taken over' },
  lost: { icon: '✖', label: 'lost' },
};

/** A run's outcome in words, as the history's Detail and the runs summary say it: "succeeded in 1 s", "failed (exit 3) in 20 s". */
export function runText(run) {
  if (!run) return '';
  let why = '';
  if (run.exit_code !== undefined && run.error) why = ` (exit ${run.exit_code}: ${run.error})`;
  else if (run.exit_code !== undefined && (run.exit_code !== 0 || run.lost)) why = ` (exit ${run.exit_code})`;
  else if (run.error) why = ` (${run.error})`;
  return `${run.outcome}${why} in ${formatDuration(run.duration_ms)}`;
}

/** The words and symbol of a run's outcome: never colour alone. */
export const runOutcomes = {
  succeeded: { icon: '✔', label: 'succeeded' },
  failed: { icon: '✖', label: 'failed' },
  lost: { icon: '⚠', label: 'lost' },
};

/**
 * A task's runs, from its history events (newest first): the released
 * events that say what their run did. last is the newest run, lastSuccess
 * and lastFailure the newest of each (a lost run is a failure), counts the
 * outcomes of the runs among these events.
 */
export function summarizeRuns(events) {
  const runs = events.filter((ev) => ev.kind === 'released' && ev.run);
  const counts = { succeeded: 0, failed: 0, lost: 0 };
  for (const ev of runs) counts[ev.run.outcome] = (counts[ev.run.outcome] ?? 0) + 1;
  return {
    last: runs[0],
    lastSuccess: runs.find((ev) => ev.run.outcome === 'succeeded'),
    lastFailure: runs.find((ev) => ev.run.outcome !== 'succeeded'),
    counts,
    total: runs.length,
  };
}
