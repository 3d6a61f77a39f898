// Following the sidecar's watch stream (GET /v1/watch) with fetch(), so
// that the bearer token can go with it: reconnection with Last-Event-ID and
// backoff, a stream gone silent reopened, and what the stream says handed to
// the page as calls of its handlers.
import { readEvents } from './sse.js';
import { backoff } from './format.js';

/** A stream with neither event nor ping for this long is reopened (the sidecar pings every 15 s). */
export const IDLE_MS = 45000;

/** Waits ms, or less when signal aborts. */
export function sleep(ms, signal) {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const t = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
  });
}

/**
 * Follows the watch stream until signal aborts, the sidecar has no watch
 * stream (404) or refuses the token (401).
 *
 * open(headers, signal) sends the request and returns the fetch Response;
 * on.ready() runs when the stream has caught up (after every (re)connection),
 * on.change(event) for each lease event (catch-up included), on.end(reason)
 * when the sidecar ends the stream, on.down(error) when the stream is lost
 * and a reconnection follows, on.missing() on 404, on.unauthorized() on 401,
 * on.reset(info) when the store's history went back (it was restored, or
 * failed over): info is the reset's data ({position, newest, detail}); the
 * events that follow, up to the next ready, replay the history the store
 * holds from its oldest event, and a reconnection resumes in that history.
 *
 * @returns {Promise<'stopped'|'missing'|'unauthorized'>}
 */
export async function follow({ open, on = {}, signal, lastEventId = '', idleMs = IDLE_MS, random = Math.random, wait = sleep }) {
  let attempt = 0;
  while (!signal.aborted) {
    const ctl = new AbortController();
    const stop = () => ctl.abort();
    signal.addEventListener('abort', stop, { once: true });
    let idle = 0;
    const alive = () => {
      clearTimeout(idle);
      idle = setTimeout(() => ctl.abort(), idleMs);
    };
    let slow = false;
    let error;
    try {
      const headers = { Accept: 'text/event-stream' };
      if (lastEventId) headers['Last-Event-ID'] = lastEventId;
      alive();
      const res = await open(headers, ctl.signal);
      if (res.status === 401) {
        on.unauthorized?.();
        return 'unauthorized';
      }
      if (res.status === 404) {
        on.missing?.();
        return 'missing';
      }
      if (!res.ok || !res.body) throw new Error(`the watch stream answered ${res.status}`);
      await readEvents(res.body, {
        onComment: alive,
        onEvent: (m) => {
          alive();
          if (m.type === 'ready') {
            attempt = 0;
            // With no event seen yet, a reconnection resumes from where this stream began.
            if (!lastEventId) {
              const position = parse(m.data)?.position;
              if (Number.isInteger(position) && position > 0) lastEventId = String(position);
            }
            on.ready?.();
            return;
          }
          if (m.type === 'reset') {
            // The position is gone from the store's history: resume from
            // the reset's id (0, the oldest event), never from the old one.
            lastEventId = m.id || '0';
            on.reset?.(parse(m.data) ?? {});
            return;
          }
          if (m.type === 'end') {
            const reason = parse(m.data)?.reason ?? '';
            // A watcher cut for falling behind reconnects at once, from its last id.
            slow = reason === 'slow';
            on.end?.(reason);
            return;
          }
          if (m.id) lastEventId = m.id;
          const ev = parse(m.data);
          if (typeof ev?.task === 'string') on.change?.(ev);
        },
      });
      error = new Error('the watch stream ended');
    } catch (e) {
      error = e;
    } finally {
      clearTimeout(idle);
      signal.removeEventListener('abort', stop);
    }
    if (signal.aborted) break;
    on.down?.(error);
    await wait(slow ? 0 : backoff(attempt, random), signal);
    attempt++;
  }
  return 'stopped';
}

function parse(data) {
  try {
    return JSON.parse(data);
  } catch {
    return undefined;
  }
}
