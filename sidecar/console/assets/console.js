// The leasehold console: reads the sidecar's /v1 API with the operator's
// bearer token, follows GET /v1/watch for changes (or polls GET /v1/leases
// where the sidecar has no watch stream), and redraws.
import { follow } from './live.js';
import { clockOffset, eventKinds, formatAgo, formatCountdown, formatDuration, formatTime, runOutcomes, runText, summarizeRuns } from './format.js';

const TOKEN_KEY = 'leasehold.token';
const POLL_MS = 3000;           // polling period without a watch stream
const HEALTH_MS = 10000;        // how often the sidecar's health is read again
const CATALOG_MS = 30000;       // and the declarations and policies
const REQUEST_MS = 15000;       // a plain API call's timeout
const PAGE_LIMIT = 1000;
const MAX_PAGES = 20;

const $ = (id) => document.getElementById(id);
const count = (n) => (Number.isFinite(n) ? new Intl.NumberFormat().format(n) : '?');

const state = {
  generation: 0,          // bumped on every (re)start: older loops stop
  leases: new Map(),      // task -> {lease, deadline: performance.now() ms at expiry}
  tasks: [],              // declarations
  policies: undefined,    // undefined: not loaded; null: no endpoint
  historyTask: null,
  caller: null,           // GET /v1/status's caller: the credential's name, prefixes and highest right
  offset: 0,              // server clock - browser clock, ms
  watching: false,        // the watch stream reached its ready event
  pending: new Set(),     // tasks to refresh after watch events
  flush: 0,
  poll: 0,
  timers: [],
  stopCtl: new AbortController(), // aborted by stop(): ends the watch and its waits
};

class Unauthorized extends Error {}

class HTTPError extends Error {
  constructor(status, detail) {
    super(detail);
    this.status = status;
  }
}

function serverNow() { return Date.now() + state.offset; }

/** Sends a request to the API with the stored token and notes the server's clock. */
async function request(path, { signal, headers = {}, method = 'GET', body } = {}) {
  const h = new Headers(headers);
  if (!h.has('Accept')) h.set('Accept', 'application/json');
  if (body !== undefined) h.set('Content-Type', 'application/json');
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) h.set('Authorization', `Bearer ${token}`);
  const sent = Date.now();
  const res = await fetch(path, {
    method, headers: h, body: body === undefined ? undefined : JSON.stringify(body),
    signal: signal ?? AbortSignal.timeout(REQUEST_MS), cache: 'no-store',
  });
  const received = Date.now();
  res.receivedAt = performance.now();
  if (received - sent < 2000) {
    const off = clockOffset(res.headers.get('Date'), sent, received);
    if (off !== undefined) state.offset = off;
  }
  return res;
}

/** request(), throwing Unauthorized on 401. */
async function call(path, options) {
  const res = await request(path, options);
  if (res.status === 401) throw new Unauthorized();
  return res;
}

async function problemDetail(res) {
  try {
    const body = await res.json();
    return body.detail || body.title || `HTTP ${res.status}`;
  } catch {
    return `HTTP ${res.status}`;
  }
}

async function getJSON(path, options) {
  const res = await call(path, options);
  if (!res.ok) throw new HTTPError(res.status, await problemDetail(res));
  const body = await res.json();
  return { body, receivedAt: res.receivedAt };
}

/** Every page of a list endpoint (GET /v1/leases, /v1/tasks), each item passed to map with its page's arrival time. */
async function getAll(path, field, map = (item) => item) {
  const items = [];
  let after = '';
  for (let page = 0; page < MAX_PAGES; page++) {
    const q = new URLSearchParams({ limit: String(PAGE_LIMIT) });
    if (after) q.set('after', after);
    const r = await getJSON(`${path}?${q}`);
    items.push(...r.body[field].map((item) => map(item, r.receivedAt)));
    if (!r.body.next_after) break;
    after = r.body.next_after;
  }
  return items;
}

const enc = encodeURIComponent;

/** A lease with the local deadline of its countdown: the store's ttl_remaining_ms counted from when the answer arrived. */
function tracked(lease, receivedAt) {
  const remaining = Number.isFinite(lease.ttl_remaining_ms)
    ? lease.ttl_remaining_ms
    : Date.parse(lease.expires_at) - serverNow();
  return { lease, deadline: receivedAt + remaining };
}

// ---- loading ----

// Reads of the whole list and of one task's lease overlap (a watch event
// arrives while the list is read): a task's lease is taken from an answer
// only when no read of it that started later has been applied already.
let reads = 0;
const applied = new Map(); // task -> number of the read whose answer the page shows

function apply(task, entry, read) {
  if ((applied.get(task) ?? 0) > read) return;
  applied.set(task, read);
  if (entry) state.leases.set(task, entry);
  else state.leases.delete(task);
}

async function loadLeases() {
  const read = ++reads;
  const items = await getAll('/v1/leases', 'leases', (l, receivedAt) => tracked(l, receivedAt));
  const fresh = new Map(items.map((t) => [t.lease.task, t]));
  for (const task of new Set([...state.leases.keys(), ...fresh.keys()])) apply(task, fresh.get(task), read);
  renderLeases();
  renderTasks();
}

async function loadLease(task) {
  const read = ++reads;
  const { body, receivedAt } = await getJSON(`/v1/leases/${enc(task)}`);
  apply(task, body.held ? tracked(body.lease, receivedAt) : undefined, read);
  renderLeases();
  renderTasks();
}

async function loadCatalog() {
  state.tasks = await getAll('/v1/tasks', 'tasks');
  try {
    state.policies = (await getJSON('/v1/policies')).body.policies;
  } catch (e) {
    if (!(e instanceof HTTPError && e.status === 404)) throw e;
    state.policies = null; // a sidecar without the endpoint
  }
  renderTasks();
  renderPolicies();
}

async function loadHistory() {
  const task = state.historyTask;
  if (task === null) return;
  const { body } = await getJSON(`/v1/leases/${enc(task)}/history?limit=50`);
  if (state.historyTask === task) renderHistory(body.events);
}

async function loadHealth() {
  try {
    const { body } = await getJSON('/v1/status');
    state.caller = body.caller ?? null;
    renderStatus(body);
    renderForce();
    return;
  } catch (e) {
    if (!(e instanceof HTTPError && e.status === 404)) throw e;
  }
  // A sidecar without /v1/status: liveness and readiness say what they can.
  const health = await fetchStatusOnly('/healthz');
  const ready = await fetchStatusOnly('/readyz');
  renderBasicHealth(health, ready);
}

async function fetchStatusOnly(path) {
  const res = await call(path);
  let body = {};
  try { body = await res.json(); } catch { /* not JSON */ }
  return { ok: res.ok, status: res.status, body };
}

/** Runs an action, routing a 401 to the token prompt and other failures to the error line. */
async function guarded(gen, action) {
  try {
    await action();
    if (gen === state.generation) showError('');
    return true;
  } catch (e) {
    if (gen !== state.generation) return false;
    if (e instanceof Unauthorized) {
      needToken();
    } else if (e.name !== 'AbortError') {
      showError(e instanceof HTTPError ? `The sidecar answered ${e.status}: ${e.message}` : `Cannot reach the sidecar: ${e.message}`);
    }
    return false;
  }
}

async function reloadAll(gen) {
  await guarded(gen, () => Promise.all([loadLeases(), loadCatalog(), loadHistory()]));
}

// ---- live updates ----

/** Says how the page keeps up; the leading symbol, if any, is hidden from screen readers. */
function setConnection(text) {
  const m = /^([●○◌]) (.*)$/su.exec(text);
  if (m) $('connection').replaceChildren(icon(m[1]), m[2]);
  else $('connection').textContent = text;
}

/** Follows GET /v1/watch until the generation changes; polls where there is none, or while it is down. */
async function watch(gen) {
  const current = () => gen === state.generation;
  await follow({
    open: (headers, signal) => request('/v1/watch?prefix=', { signal, headers }),
    signal: state.stopCtl.signal,
    on: {
      ready() {
        if (!current()) return;
        state.watching = true;
        stopPolling();
        setConnection('● Live: following the watch stream');
        // The events replayed before ready are covered by reading everything again.
        reloadAll(gen);
        guarded(gen, loadHealth);
      },
      change(ev) {
        if (current() && state.watching) changed(gen, ev);
      },
      end(reason) {
        if (current()) setConnection(`○ The sidecar ended the watch stream (${reason || 'no reason given'}): reconnecting…`);
      },
      reset() {
        if (!current()) return;
        // The store's history went back (restored, or failed over): what the
        // page shows may be of events that are gone, and the ids it followed
        // are handed out again. The replay that follows is covered by reading
        // everything again, now and once it is ready.
        state.watching = false;
        setConnection('○ The store\'s history went back (restored or failed over): reading everything again…');
        reloadAll(gen);
      },
      down() {
        if (!current()) return;
        state.watching = false;
        // Until the stream is back, the page polls, so that it never shows stale leases for long.
        startPolling(gen, 'the watch stream is interrupted; reconnecting');
      },
      missing() {
        // A sidecar older than the watch stream: polling is all there is.
        if (current()) startPolling(gen, 'this sidecar has no watch stream');
      },
      unauthorized() {
        if (current()) needToken();
      },
    },
  });
}

/** Notes a watch event: its task's lease (and history, if shown) are read again, a few events at a time. */
function changed(gen, ev) {
  const kind = eventKinds[ev.kind];
  setConnection(`● Live: ${kind ? kind.label : ev.kind} ${ev.task} at ${formatTime(ev.at, serverNow())}`);
  state.pending.add(ev.task);
  if (state.flush) return;
  state.flush = setTimeout(async () => {
    state.flush = 0;
    const tasks = [...state.pending];
    state.pending.clear();
    await guarded(gen, async () => {
      await Promise.all(tasks.map(loadLease));
      if (tasks.includes(state.historyTask)) await loadHistory();
    });
  }, 100);
}

/** Polls the leases (and the open history) while there is no watch stream to follow. */
function startPolling(gen, why) {
  setConnection(`◌ Polling every ${POLL_MS / 1000} s (${why})`);
  if (state.poll) return;
  reloadAll(gen);
  state.poll = setInterval(() => {
    guarded(gen, () => Promise.all([loadLeases(), loadHistory()]));
  }, POLL_MS);
}

function stopPolling() {
  clearInterval(state.poll);
  state.poll = 0;
}

// ---- token ----

function needToken() {
  const had = sessionStorage.getItem(TOKEN_KEY) !== null;
  sessionStorage.removeItem(TOKEN_KEY);
  stop();
  clearData();
  $('token-message').textContent = had
    ? 'The sidecar refused that token. Check it and try again.'
    : 'This sidecar requires a bearer token: paste the content of its token file.';
  $('token-panel').hidden = false;
  $('forget-token').hidden = true;
  setConnection('○ Waiting for a token');
  $('token-input').focus();
}

function onTokenSubmit(e) {
  e.preventDefault();
  const value = $('token-input').value.trim();
  if (!value) return;
  sessionStorage.setItem(TOKEN_KEY, value);
  $('token-input').value = '';
  $('token-panel').hidden = true;
  start();
}

/** Empties the page: nothing read with a token stays once the token is gone. */
function clearData() {
  state.leases.clear();
  applied.clear();
  state.tasks = [];
  state.policies = undefined;
  state.caller = null;
  closeHistory();
  renderLeases();
  renderPolicies();
  $('health-list').replaceChildren(fact('State', '—'));
  $('batching').replaceChildren();
}

function forgetToken() {
  sessionStorage.removeItem(TOKEN_KEY);
  clearData();
  start();
}

// ---- rendering ----

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null) continue;
    if (k === 'class') node.className = v;
    else if (k === 'dataset') Object.assign(node.dataset, v);
    else if (k.startsWith('on')) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    node.append(c instanceof Node ? c : String(c));
  }
  return node;
}

/** A symbol beside a word that says the same: hidden from screen readers, which read the word. */
function icon(symbol) { return el('span', { 'aria-hidden': 'true' }, symbol, ' '); }

/** A table cell naming its column (the phone layout shows the name beside the value). */
function cell(label, ...children) { return el('td', { 'data-label': label }, ...children); }

function timeNode(iso) {
  return el('span', {},
    el('time', { datetime: iso, title: iso }, formatTime(iso, serverNow())), ' ',
    el('span', { class: 'ago', dataset: { at: iso } }, `(${formatAgo(iso, serverNow())})`));
}

function countdownNode(task) {
  return el('span', { class: 'countdown', dataset: { task } });
}

// What each table last drew: a table redraws only when its content changed,
// so that polling keeps the keyboard focus and the text selection in place.
const drawn = {};

function unchanged(table, content) {
  const key = JSON.stringify(content);
  if (drawn[table] === key) return true;
  drawn[table] = key;
  return false;
}

function renderLeases() {
  const rows = [...state.leases.values()].sort((a, b) => (a.lease.task < b.lease.task ? -1 : 1));
  if (unchanged('leases', rows.map(({ lease: l }) => [l.task, l.owner, l.token, l.note, l.acquired_at, l.renewed_at, l.renew_count]))) {
    tick();
    return;
  }
  $('lease-rows').replaceChildren(...rows.map(({ lease }) => el('tr', { dataset: { task: lease.task } },
    cell('Task', el('button', { type: 'button', class: 'link', title: `Show the history of ${lease.task}`, onclick: () => openHistory(lease.task) }, lease.task)),
    cell('Owner', el('span', { class: 'mono owner' }, lease.owner)),
    cell('Token', el('span', { class: 'mono token' }, lease.token)),
    cell('Note', lease.note || el('span', { class: 'empty' }, '—')),
    cell('Acquired', timeNode(lease.acquired_at)),
    cell('Renewed', timeNode(lease.renewed_at), lease.renew_count ? ` · ${lease.renew_count}×` : ''),
    cell('Expires in', countdownNode(lease.task)),
  )));
  renderForce();
  $('lease-count').textContent = `(${rows.length})`;
  $('lease-empty').hidden = rows.length > 0;
  $('lease-table').hidden = rows.length === 0;
  tick();
}

function renderTasks() {
  const byName = new Map(state.tasks.map((d) => [d.name, d]));
  for (const task of state.leases.keys()) if (!byName.has(task)) byName.set(task, null);
  const names = [...byName.keys()].sort();
  if (unchanged('tasks', [state.historyTask, ...names.map((n) => [n, byName.get(n), state.leases.get(n)?.lease.owner])])) return;
  $('task-rows').replaceChildren(...names.map((name) => {
    const decl = byName.get(name);
    const held = state.leases.get(name);
    const stateNode = held
      ? el('span', { class: 'state ok' }, icon('●'), 'held by ', el('span', { class: 'mono' }, held.lease.owner))
      : el('span', { class: 'state idle' }, icon('○'), 'idle');
    const selected = state.historyTask === name;
    return el('tr', { dataset: { task: name }, class: selected ? 'selected' : undefined, 'aria-current': selected ? 'true' : undefined },
      cell('Task', el('button', { type: 'button', class: 'link', title: `Show the history of ${name}`, onclick: () => openHistory(name) }, name)),
      cell('State', stateNode),
      cell('TTL', decl ? formatDuration(decl.ttl_ms) : 'undeclared'),
      cell('Max TTL', decl?.max_ttl_ms ? formatDuration(decl.max_ttl_ms) : '—'),
      cell('Policy', decl ? decl.retention_policy : 'default'),
      cell('Description', decl?.description || '—'));
  }));
  $('task-empty').hidden = names.length > 0;
  $('task-table').hidden = names.length === 0;
}

function renderHistory(events) {
  if (unchanged('history', [state.historyTask, events])) return;
  $('history-rows').replaceChildren(...events.map((ev) => {
    const kind = eventKinds[ev.kind] ?? { icon: '•', label: ev.kind };
    return el('tr', { dataset: { kind: ev.kind, id: ev.id } },
      cell('When', timeNode(ev.at)),
      cell('Event', el('span', { class: `state kind-${ev.kind}` }, icon(kind.icon), kind.label)),
      cell('Owner', el('span', { class: 'mono owner' }, ev.owner)),
      cell('Token', el('span', { class: 'mono token' }, ev.token)),
      // The credential the recording operation acted for; none (—) for the library, the pruner, an expiry.
      cell('Credential', ev.credential ? el('span', { class: 'mono credential' }, ev.credential) : '—'),
      cell('Detail', eventDetail(ev) || '—'));
  }));
  $('history-empty').hidden = events.length > 0;
  $('history-table').hidden = events.length === 0;
  renderRuns(events);
}

/** What an event says beyond its columns: its detail, a released event's run and the hold that rests the task. */
function eventDetail(ev) {
  const parts = [];
  if (ev.detail) parts.push(ev.detail);
  if (ev.run) parts.push(`run ${runText(ev.run)}`);
  if (ev.hold_until) parts.push(`rests until ${formatTime(ev.hold_until, serverNow())}`);
  return parts.join('; ');
}

/** The task's runs: the newest, the newest success and failure, with when, who and how long. */
function renderRuns(events) {
  const s = summarizeRuns(events);
  $('runs').hidden = s.total === 0;
  if (s.total === 0) return;
  const outcome = (ev) => {
    const o = runOutcomes[ev.run.outcome] ?? { icon: '•', label: ev.run.outcome };
    return el('span', { class: `state run-${ev.run.outcome}` }, icon(o.icon), runText(ev.run));
  };
  const when = (ev) => [timeNode(ev.at), ' by ', el('span', { class: 'mono owner' }, ev.owner), ` (token ${ev.token})`];
  const fact2 = (term, id, ev) => el('div', { id }, el('dt', {}, term),
    el('dd', {}, ...(ev ? [outcome(ev), ', ', ...when(ev)] : ['none among these events'])));
  $('runs-facts').replaceChildren(
    fact2('Last run', 'run-last', s.last),
    fact2('Last success', 'run-success', s.lastSuccess),
    fact2('Last failure', 'run-failure', s.lastFailure),
    fact('Runs shown', `${s.total}: ${s.counts.succeeded} succeeded, ${s.counts.failed} failed, ${s.counts.lost} lost`));
}

function renderPolicies() {
  const list = state.policies;
  if (unchanged('policies', list ?? String(list))) return;
  $('policy-rows').replaceChildren(...(list ?? []).map((p) => el('tr', {},
    cell('Policy', p.name),
    cell('Keep for', p.keep_for_ms ? formatDuration(p.keep_for_ms) : 'no age limit'),
    cell('Keep last', p.keep_last ? `${count(p.keep_last)} events` : 'no count limit'),
    cell('Updated', timeNode(p.updated_at)))));
  const empty = list === undefined ? 'Loading…' : list === null ? 'This sidecar does not list retention policies.' : '';
  $('policy-empty').textContent = empty;
  $('policy-empty').hidden = !empty;
  $('policy-table').hidden = !list || list.length === 0;
}

function fact(term, ...value) { return el('div', {}, el('dt', {}, term), el('dd', {}, ...value)); }

function readiness(ready, detail) {
  return ready
    ? el('span', { class: 'state ok' }, icon('✔'), 'ready')
    : el('span', { class: 'state bad' }, icon('✖'), 'not ready', detail ? `: ${detail}` : '');
}

function renderStatus(s) {
  const facts = [
    fact('Version', s.version || '—'),
    fact('Started', s.started_at ? timeNode(s.started_at) : '—'),
    fact('Store', `${s.store?.kind ?? '?'} · `, readiness(s.store?.ready, s.store?.detail)),
    fact('Keepalive streams', `${count(s.streams?.open)} open of ${count(s.streams?.max)}`),
    fact('Watchers', count(s.watchers)),
  ];
  $('health-list').replaceChildren(...facts);
  const batching = s.batching ?? [];
  $('batching').replaceChildren(...(batching.length === 0 ? [] : [
    el('h3', { id: 'batching-title' }, 'Batching'),
    el('table', { class: 'grid', 'aria-labelledby': 'batching-title' },
      el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'Operation'), el('th', { scope: 'col' }, 'Statements'),
        el('th', { scope: 'col' }, 'Operations'), el('th', { scope: 'col' }, 'Operations per statement'))),
      el('tbody', {}, ...batching.map((b) => el('tr', {},
        cell('Operation', b.op),
        cell('Statements', count(b.statements)),
        cell('Operations', count(b.operations)),
        cell('Per statement', b.statements ? (b.operations / b.statements).toFixed(1) : '—'))))),
  ]));
}

function renderBasicHealth(health, ready) {
  $('health-list').replaceChildren(
    fact('Process', health.ok ? el('span', { class: 'state ok' }, icon('✔'), 'alive') : el('span', { class: 'state bad' }, icon('✖'), `HTTP ${health.status}`)),
    fact('Version', health.body.version || '—'),
    fact('Store', readiness(ready.ok, ready.ok ? '' : ready.body.detail || `HTTP ${ready.status}`)),
  );
  $('batching').replaceChildren();
}

function showError(text) {
  $('error').textContent = text;
  $('error').hidden = !text;
}

/** Redraws what moves with the clock: countdowns and "ago" texts. */
function tick() {
  const now = performance.now();
  for (const node of document.querySelectorAll('.countdown')) {
    const t = state.leases.get(node.dataset.task);
    if (!t) continue;
    const left = t.deadline - now;
    node.textContent = left > 0 ? `◷ ${formatCountdown(left)}` : '⊘ expired';
    node.dataset.remainingMs = String(Math.max(0, Math.round(left)));
  }
  const snow = serverNow();
  for (const node of document.querySelectorAll('.ago')) node.textContent = `(${formatAgo(node.dataset.at, snow)})`;
}

/** Shows the history of task and, unless it came from the URL, puts the task in the URL (#task=NAME), a new entry of the tab's history. */
function openHistory(task, { fromURL = false } = {}) {
  if (!fromURL && taskInURL() !== task) history.pushState(null, '', `#${new URLSearchParams({ task })}`);
  if (state.historyTask !== task) note('');
  state.historyTask = task;
  $('history-task').textContent = task;
  $('history-rows').replaceChildren();
  delete drawn.history;
  $('history-empty').hidden = true;
  $('history').hidden = false;
  renderTasks();
  renderForce();
  const gen = state.generation;
  guarded(gen, loadHistory);
  $('history').scrollIntoView({ block: 'nearest' });
}

/** Hides the history; a close the operator asked for (not one from the URL, nor the page emptied) takes the task out of the URL. */
function closeHistory({ fromURL = true } = {}) {
  if (!fromURL && taskInURL() !== null) history.pushState(null, '', location.pathname + location.search);
  state.historyTask = null;
  note('');
  $('history').hidden = true;
  renderTasks();
}

/** The task the URL selects (#task=NAME), or null. */
function taskInURL() {
  const task = new URLSearchParams(location.hash.slice(1)).get('task');
  return task ? task : null;
}

/** Shows what the URL selects: on load, after a reload, and on back and forward. */
function followURL() {
  const task = taskInURL();
  if (task === state.historyTask) return;
  if (task === null) closeHistory();
  else openHistory(task, { fromURL: true });
}

function onLookup(e) {
  e.preventDefault();
  const task = $('task-lookup-input').value.trim();
  if (task) openHistory(task);
}

// ---- force release ----

/** Whether the page's credential has the admin right on task (GET /v1/status's caller: its highest right and prefixes). */
function mayRevoke(task) {
  const c = state.caller;
  return !!c && c.right === 'admin' && (c.prefixes ?? []).some((p) => p === '*' || task.startsWith(p));
}

/** Offers the force release of the selected task while it is held and the credential may end it. */
function renderForce() {
  const task = state.historyTask;
  $('force-release').hidden = !(task !== null && state.leases.has(task) && mayRevoke(task));
}

function note(text) {
  $('history-note').textContent = text;
  $('history-note').hidden = !text;
}

/** Asks for confirmation, then ends the lease the page shows (its token: a lease that changed hands since is not ended). */
function onForce() {
  const task = state.historyTask;
  const held = task === null ? undefined : state.leases.get(task);
  if (!held) return;
  const { owner, token } = held.lease;
  $('force-task').textContent = task;
  $('force-text').textContent = `This ends the lease of ${owner} (token ${token}) now, whoever holds it.`;
  const dialog = $('force-dialog');
  dialog.returnValue = '';
  dialog.onclose = () => {
    if (dialog.returnValue === 'release') revoke(task, owner, token);
  };
  dialog.showModal();
}

async function revoke(task, owner, token) {
  const gen = state.generation;
  await guarded(gen, async () => {
    const res = await call(`/v1/leases/${enc(task)}/revoke`, { method: 'POST', body: { token } });
    if (!res.ok) throw new HTTPError(res.status, await problemDetail(res));
    const body = await res.json();
    if (state.historyTask === task) {
      note(body.released
        ? `Released: ended the lease of ${owner} (token ${token}).`
        : `Nothing released: ${task} is no longer held under token ${token}.`);
    }
    await loadLease(task);
    await loadHistory();
  });
}

// ---- life cycle ----

function stop() {
  state.generation++;
  state.watching = false;
  state.stopCtl.abort();
  state.stopCtl = new AbortController();
  stopPolling();
  for (const t of state.timers) clearInterval(t);
  state.timers = [];
}

function start() {
  stop();
  const gen = state.generation;
  $('forget-token').hidden = sessionStorage.getItem(TOKEN_KEY) === null;
  setConnection('Connecting…');
  guarded(gen, loadHealth);
  state.timers.push(setInterval(() => guarded(gen, loadHealth), HEALTH_MS));
  state.timers.push(setInterval(() => guarded(gen, loadCatalog), CATALOG_MS));
  followURL();
  reloadAll(gen);
  watch(gen);
}

$('token-form').addEventListener('submit', onTokenSubmit);
$('forget-token').addEventListener('click', forgetToken);
$('history-close').addEventListener('click', () => closeHistory({ fromURL: false }));
$('task-lookup').addEventListener('submit', onLookup);
$('force-release').addEventListener('click', onForce);
window.addEventListener('popstate', followURL);
window.addEventListener('hashchange', followURL);
setInterval(tick, 1000);
start();
