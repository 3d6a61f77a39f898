// node --test: following the watch stream (../assets/live.js) against
// scripted answers: reconnection from the last id, the ready position,
// slow and shutdown ends, resets, 404, 401, failures with backoff, a silent
// stream.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { follow } from '../assets/live.js';

const enc = new TextEncoder();

/** A Response whose body is the given chunks; with hang, the body then stays open until aborted. */
function stream(chunks, { hang = false, signal } = {}) {
  const body = new ReadableStream({
    start(ctl) {
      for (const c of chunks) ctl.enqueue(enc.encode(c));
      if (!hang) ctl.close();
      else signal.addEventListener('abort', () => ctl.error(new DOMException('aborted', 'AbortError')), { once: true });
    },
  });
  return new Response(body, { status: 200, headers: { 'Content-Type': 'text/event-stream' } });
}

const event = (id, kind, task) =>
  `id: ${id}\nevent: ${kind}\ndata: ${JSON.stringify({ id, task, kind, owner: 'w1', token: 1, at: '2026-12-03T17:00:00.000Z', detail: '' })}\n\n`;

/** Runs follow() over a script of answers, one per request; records requests, calls and waits. */
async function run(script, options = {}) {
  const requests = [];
  const calls = [];
  const waits = [];
  const ctl = new AbortController();
  const result = await follow({
    signal: ctl.signal,
    random: () => 0,
    wait: async (ms) => { waits.push(ms); },
    open: async (headers, signal) => {
      requests.push(headers);
      const next = script[requests.length - 1];
      if (!next) {
        ctl.abort();
        throw new DOMException('aborted', 'AbortError');
      }
      return next(signal);
    },
    on: {
      ready: () => calls.push('ready'),
      change: (ev) => calls.push(`${ev.kind} ${ev.task} ${ev.id}`),
      end: (reason) => calls.push(`end ${reason}`),
      reset: (info) => calls.push(`reset ${info.position} ${info.newest}`),
      down: () => calls.push('down'),
      missing: () => calls.push('missing'),
      unauthorized: () => calls.push('unauthorized'),
    },
    ...options,
  });
  return { result, requests, calls, waits };
}

test('catch-up, ready, live events; reconnects with Last-Event-ID = the last id seen', async () => {
  const { result, requests, calls, waits } = await run([
    () => stream([': ping\n\n', event(5, 'acquired', 'a'), 'event: ready\ndata: {"position":5}\n\n', event(6, 'released', 'a')]),
    () => new Response('{}', { status: 404 }),
  ]);
  assert.equal(result, 'missing');
  assert.deepEqual(calls, ['acquired a 5', 'ready', 'released a 6', 'down', 'missing']);
  assert.equal(requests[0]['Last-Event-ID'], undefined, 'the first request resumes from nothing');
  assert.equal(requests[0].Accept, 'text/event-stream');
  assert.equal(requests[1]['Last-Event-ID'], '6');
  assert.deepEqual(waits, [250], 'after a stream that was ready, the first backoff');
});

test('with no event seen, a reconnection resumes from the ready position', async () => {
  const { requests } = await run([
    () => stream(['event: ready\ndata: {"position":41}\n\n']),
    () => stream(['event: ready\ndata: {"position":99}\n\n']),
  ]);
  assert.equal(requests[1]['Last-Event-ID'], '41');
  assert.equal(requests[2]['Last-Event-ID'], '41', 'a later ready does not move a resume point already known');
});

test('an end for being slow reconnects at once; a shutdown backs off', async () => {
  const { calls, waits } = await run([
    () => stream(['event: ready\ndata: {"position":1}\n\n', 'event: end\ndata: {"reason":"slow","detail":"x"}\n\n']),
    () => stream(['event: ready\ndata: {"position":1}\n\n', 'event: end\ndata: {"reason":"shutdown"}\n\n']),
  ]);
  assert.deepEqual(calls, ['ready', 'end slow', 'down', 'ready', 'end shutdown', 'down']);
  assert.deepEqual(waits, [0, 250]);
});

test('failures back off, doubling; a ready resets the backoff', async () => {
  const fail = () => new Response('{"detail":"too many watchers"}', { status: 503 });
  const { calls, waits } = await run([
    fail, fail, fail,
    () => stream(['event: ready\ndata: {"position":1}\n\n']),
    fail,
  ]);
  assert.deepEqual(calls, ['down', 'down', 'down', 'ready', 'down', 'down']);
  assert.deepEqual(waits, [250, 500, 1000, 250, 500]);
});

test('a refused token stops following', async () => {
  const { result, calls, requests } = await run([() => new Response('{}', { status: 401 })]);
  assert.equal(result, 'unauthorized');
  assert.deepEqual(calls, ['unauthorized']);
  assert.equal(requests.length, 1);
});

test('a stream silent for longer than idleMs is reopened', async () => {
  const { calls, requests } = await run([
    (signal) => stream(['event: ready\ndata: {"position":3}\n\n'], { hang: true, signal }),
    () => new Response('{}', { status: 404 }),
  ], { idleMs: 50 });
  assert.deepEqual(calls, ['ready', 'down', 'missing']);
  assert.equal(requests[1]['Last-Event-ID'], '3');
});

test('aborting the signal stops following, even mid-stream', async () => {
  const ctl = new AbortController();
  const calls = [];
  const done = follow({
    signal: ctl.signal,
    open: async (_headers, signal) => stream(['event: ready\ndata: {"position":1}\n\n'], { hang: true, signal }),
    on: { ready: () => { calls.push('ready'); ctl.abort(); }, down: () => calls.push('down') },
  });
  assert.equal(await done, 'stopped');
  assert.deepEqual(calls, ['ready'], 'no reconnection after the abort');
});

test('malformed data is ignored, not thrown', async () => {
  const { calls } = await run([
    () => stream(['id: 7\nevent: acquired\ndata: not json\n\n', 'event: ready\ndata: nope\n\n', event(8, 'expired', 'b')]),
  ]);
  assert.deepEqual(calls, ['ready', 'expired b 8', 'down']);
});

const reset = (position, newest) =>
  `id: 0\nevent: reset\ndata: ${JSON.stringify({ position, newest, detail: 'restored' })}\n\n`;

test('a reset starts over: the replayed events are changes, and a reconnection resumes in the new history', async () => {
  const { calls, requests } = await run([
    () => stream(['event: ready\ndata: {"position":5}\n\n', event(6, 'acquired', 'old'),
      reset(6, 3), event(1, 'acquired', 'a'), event(2, 'released', 'a'), 'event: ready\ndata: {"position":2}\n\n']),
    () => stream([reset(9, 2)]), // cut off before anything was replayed
    () => stream(['event: ready\ndata: {"position":2}\n\n']),
  ]);
  assert.deepEqual(calls, ['ready', 'acquired old 6', 'reset 6 3', 'acquired a 1', 'released a 2', 'ready', 'down',
    'reset 9 2', 'down', 'ready', 'down']);
  assert.equal(requests[1]['Last-Event-ID'], '2', 'after the replay, from its last event, not from 6');
  assert.equal(requests[2]['Last-Event-ID'], '0', 'cut off after a reset: from the oldest event');
  assert.equal(requests[3]['Last-Event-ID'], '0');
});
