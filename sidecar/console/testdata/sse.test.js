// node --test: the console's event stream parser (../assets/sse.js).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createParser, readEvents } from '../assets/sse.js';

function collect() {
  const events = [];
  const comments = [];
  const retries = [];
  const parser = createParser({
    onEvent: (m) => events.push(m),
    onComment: (c) => comments.push(c),
    onRetry: (ms) => retries.push(ms),
  });
  return { parser, events, comments, retries };
}

const acquired = 'id: 41\nevent: acquired\ndata: {"id":41,"task":"nightly","kind":"acquired","owner":"w1","token":7,"at":"2026-12-03T17:00:00.000Z","detail":""}\n\n';

test('the wire contract: events with ids, ready without, pings, end', () => {
  const { parser, events, comments } = collect();
  parser.push(': ping\n\n');
  parser.push(acquired);
  parser.push('event: ready\ndata: {"position": 41}\n\n');
  parser.push(': ping\n\n');
  parser.push('event: end\ndata: {"reason":"slow","detail":"cut"}\n\n');
  assert.deepEqual(comments, ['ping', 'ping']);
  assert.equal(events.length, 3);
  assert.equal(events[0].type, 'acquired');
  assert.equal(events[0].id, '41');
  assert.equal(JSON.parse(events[0].data).task, 'nightly');
  assert.equal(events[1].type, 'ready');
  assert.deepEqual(JSON.parse(events[1].data), { position: 41 });
  // ready has no id line: the last id seen stays the one to resume from.
  assert.equal(events[1].id, '41');
  assert.equal(parser.lastEventId, '41');
  assert.equal(events[2].type, 'end');
  assert.equal(JSON.parse(events[2].data).reason, 'slow');
});

test('an event split at every byte is the same event', () => {
  const whole = collect();
  whole.parser.push(acquired);
  const split = collect();
  for (const ch of acquired) split.parser.push(ch);
  assert.deepEqual(split.events, whole.events);
  assert.equal(split.events.length, 1);
});

test('CRLF, CR and LF all end lines, CRLF split across chunks included', () => {
  const { parser, events } = collect();
  parser.push('event: a\r\ndata: 1\r');
  parser.push('\n\r\n');
  parser.push('event: b\rdata: 2\r\r');
  parser.push('data: 3\n\n');
  assert.deepEqual(events.map((e) => [e.type, e.data]), [['a', '1'], ['b', '2'], ['message', '3']]);
});

test('data lines join with newlines; one leading space is dropped, no more', () => {
  const { parser, events } = collect();
  parser.push('data:first\ndata:  second\ndata\n\n');
  assert.equal(events[0].data, 'first\n second\n');
});

test('a block without data dispatches nothing and resets the event type', () => {
  const { parser, events } = collect();
  parser.push('event: acquired\n\n');
  parser.push('data: x\n\n');
  assert.deepEqual(events.map((e) => e.type), ['message']);
});

test('unknown fields are ignored, retry is numeric only, an id with NUL is ignored', () => {
  const { parser, events, retries } = collect();
  parser.push('retry: 1500\nretry: soon\nfoo: bar\nid: 9\ndata: a\n\n');
  parser.push('id: 1\u00002\ndata: b\n\n');
  assert.deepEqual(retries, [1500]);
  assert.deepEqual(events.map((e) => e.id), ['9', '9']);
});

test('an event cut off by the end of the stream is dropped', async () => {
  const text = acquired + 'id: 42\nevent: released\ndata: {"task":"nightly"}\n';
  const bytes = new TextEncoder().encode(text);
  const body = new ReadableStream({
    start(ctl) {
      // Split inside a multi-byte character's neighbourhood and mid-line.
      ctl.enqueue(bytes.slice(0, 17));
      ctl.enqueue(bytes.slice(17));
      ctl.close();
    },
  });
  const events = [];
  const last = await readEvents(body, { onEvent: (m) => events.push(m) });
  assert.deepEqual(events.map((e) => e.type), ['acquired']);
  assert.equal(last, '42', 'the id line was read even though its event was not dispatched');
});

test('UTF-8 split across chunks decodes whole', async () => {
  const bytes = new TextEncoder().encode('data: café ☕\n\n');
  const body = new ReadableStream({
    start(ctl) {
      for (const b of bytes) ctl.enqueue(new Uint8Array([b]));
      ctl.close();
    },
  });
  const events = [];
  await readEvents(body, { onEvent: (m) => events.push(m) });
  assert.equal(events[0].data, 'café ☕');
});
