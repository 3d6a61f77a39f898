// node --test: the console's pure helpers (../assets/format.js).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { backoff, clockOffset, formatAgo, formatCountdown, formatDuration } from '../assets/format.js';

test('durations read as people say them', () => {
  const cases = [
    [0, '0 ms'], [850, '850 ms'], [1000, '1 s'], [42_900, '42 s'], [185_000, '3 min 05 s'], [120_000, '2 min'],
    [3_600_000, '1 h'], [7_800_000, '2 h 10 min'], [30 * 86_400_000, '30 d'], [49 * 3_600_000, '2 d 1 h'],
    [-5, '0 ms'], [NaN, '—'],
  ];
  for (const [ms, want] of cases) assert.equal(formatDuration(ms), want, `formatDuration(${ms})`);
});

test('a countdown rounds up and says expired at zero', () => {
  assert.equal(formatCountdown(9_001), '10 s');
  assert.equal(formatCountdown(10_000), '10 s');
  assert.equal(formatCountdown(120_000), '2 min 00 s');
  assert.equal(formatCountdown(119_001), '2 min 00 s');
  assert.equal(formatCountdown(119_000), '1 min 59 s');
  assert.equal(formatCountdown(7_200_000), '2 h');
  assert.equal(formatCountdown(1), '1 s');
  assert.equal(formatCountdown(0), 'expired');
  assert.equal(formatCountdown(-20), 'expired');
});

test('the clock offset comes from the Date header, mid round trip', () => {
  const server = Date.parse('Thu, 03 Dec 2026 17:00:00 GMT');
  // A browser one hour behind the server, 200 ms round trip.
  const sent = server - 3_600_000;
  const off = clockOffset('Thu, 03 Dec 2026 17:00:00 GMT', sent, sent + 200);
  assert.equal(off, 3_600_000 + 500 - 100);
  assert.equal(clockOffset(null, 0, 1), undefined);
  assert.equal(clockOffset('not a date', 0, 1), undefined);
});

test('ago is measured on the server clock', () => {
  const at = '2026-12-03T17:00:00.000Z';
  const t = Date.parse(at);
  assert.equal(formatAgo(at, t + 12_400), '12 s ago');
  assert.equal(formatAgo(at, t + 300), 'just now');
  assert.equal(formatAgo(at, t - 26), 'just now', 'within the clock estimate: not in the future');
  assert.equal(formatAgo(at, t - 3_000), 'in 3 s');
});

test('backoff doubles to a cap, with jitter in [0.5, 1)', () => {
  assert.equal(backoff(0, () => 0), 250);
  assert.equal(backoff(0, () => 0.999999), 500);
  assert.equal(backoff(3, () => 0), 2000);
  assert.equal(backoff(50, () => 0.999999), 30000);
  for (let i = 0; i < 20; i++) assert.ok(backoff(i) <= 30000);
});

test('a run reads as its outcome, why, and how long', async () => {
  const { runText } = await import('../assets/format.js');
  assert.equal(runText({ outcome: 'succeeded', exit_code: 0, error: '', duration_ms: 1500, lost: false }), 'succeeded in 1 s');
  assert.equal(runText({ outcome: 'failed', exit_code: 3, error: '', duration_ms: 20_000, lost: false }), 'failed (exit 3) in 20 s');
  assert.equal(runText({ outcome: 'failed', error: 'killed by signal 9 (killed)', duration_ms: 100, lost: false }), 'failed (killed by signal 9 (killed)) in 100 ms');
  assert.equal(runText({ outcome: 'lost', exit_code: 143, error: '', duration_ms: 65_000, lost: true }), 'lost (exit 143) in 1 min 05 s');
  assert.equal(runText(undefined), '');
});

test('a task\'s runs: the newest, the newest success and failure, the counts', async () => {
  const { summarizeRuns } = await import('../assets/format.js');
  const ev = (id, kind, outcome) => ({ id, kind, ...(outcome ? { run: { outcome, duration_ms: id } } : {}) });
  const events = [ev(9, 'acquired'), ev(8, 'released', 'failed'), ev(7, 'acquired'), ev(6, 'released'), ev(5, 'released', 'lost'),
    ev(4, 'released', 'succeeded'), ev(3, 'expired'), ev(2, 'released', 'succeeded')];
  const s = summarizeRuns(events);
  assert.equal(s.last.id, 8);
  assert.equal(s.lastSuccess.id, 4);
  assert.equal(s.lastFailure.id, 8);
  assert.deepEqual(s.counts, { succeeded: 2, failed: 1, lost: 1 });
  assert.equal(s.total, 4);
  const none = summarizeRuns([ev(1, 'acquired')]);
  assert.equal(none.total, 0);
  assert.equal(none.last, undefined);
});
