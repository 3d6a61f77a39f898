// A server-sent events parser for streams read with fetch(), which, unlike
// EventSource, can send an Authorization header. It follows the HTML
// standard's "event stream interpretation": lines end with CRLF, LF or CR;
// a blank line dispatches the event gathered so far; "data" lines join with
// "\n"; a field named by no other rule is ignored; a line starting with ":"
// is a comment; the last event id persists from event to event until an
// "id" line changes it.

/**
 * @typedef {{type: string, data: string, id: string}} SSEMessage
 * @typedef {{onEvent?: (m: SSEMessage) => void, onComment?: (text: string) => void,
 *            onRetry?: (ms: number) => void}} SSEHandlers
 */

/** Creates a parser; feed it text with push() as it arrives. */
export function createParser(/** @type {SSEHandlers} */ handlers) {
  let buffer = '';
  let data = [];
  let type = '';
  let lastId = '';
  let pendingCR = false; // a chunk ended with CR: a LF starting the next one belongs to it

  function line(text) {
    if (text === '') {
      if (data.length > 0) {
        handlers.onEvent?.({ type: type || 'message', data: data.join('\n'), id: lastId });
      }
      data = [];
      type = '';
      return;
    }
    if (text.startsWith(':')) {
      handlers.onComment?.(text.slice(1).replace(/^ /, ''));
      return;
    }
    const colon = text.indexOf(':');
    const field = colon < 0 ? text : text.slice(0, colon);
    let value = colon < 0 ? '' : text.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    switch (field) {
      case 'data': data.push(value); break;
      case 'event': type = value; break;
      case 'id': if (!value.includes('\0')) lastId = value; break;
      case 'retry': if (/^[0-9]+$/.test(value)) handlers.onRetry?.(Number(value)); break;
      default: break;
    }
  }

  return {
    /** Feeds the next piece of the stream's text. */
    push(chunk) {
      if (pendingCR && chunk.startsWith('\n')) chunk = chunk.slice(1);
      pendingCR = false;
      buffer += chunk;
      let start = 0;
      for (;;) {
        const cr = buffer.indexOf('\r', start);
        const lf = buffer.indexOf('\n', start);
        if (cr < 0 && lf < 0) break;
        const end = cr < 0 ? lf : lf < 0 ? cr : Math.min(cr, lf);
        line(buffer.slice(start, end));
        if (buffer[end] === '\r') {
          if (end + 1 === buffer.length) {
            pendingCR = true;
            start = end + 1;
            break;
          }
          start = buffer[end + 1] === '\n' ? end + 2 : end + 1;
        } else {
          start = end + 1;
        }
      }
      buffer = buffer.slice(start);
    },
    /** The id of the last event seen (an "id" line), or "" when none. */
    get lastEventId() { return lastId; },
  };
}

/**
 * Reads a fetch() response body as an event stream until it ends or signal
 * aborts; an incomplete event at the end is dropped, as the standard says.
 * @param {ReadableStream<Uint8Array>} body
 * @param {SSEHandlers} handlers
 */
export async function readEvents(body, handlers) {
  const parser = createParser(handlers);
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return parser.lastEventId;
      parser.push(value);
    }
  } finally {
    reader.releaseLock();
  }
}
