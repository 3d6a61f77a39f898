// Other web pages against a sidecar with no token (the default of make run),
// in headless Chromium: e2e TestCrossSiteBrowser starts the sidecar
// (LEASEHOLD_SIDECAR_URL). A page served by another origin tries every way a
// page can make a browser send a request without reading the answer (an
// iframe, an img, a form, a no-cors fetch, an EventSource) on the claim and
// keepalive routes; then a page whose name was rebound to the sidecar's
// address (DNS rebinding, played by Chromium's --host-resolver-rules) calls
// the API as a same-origin page. No lease, fencing token or history event may
// result, and the sidecar's own console must still work.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { launchChromium } from './browser.js';

const base = process.env.LEASEHOLD_SIDECAR_URL;
const executablePath = process.env.LEASEHOLD_CHROMIUM;
assert.ok(base && executablePath, 'LEASEHOLD_SIDECAR_URL and LEASEHOLD_CHROMIUM are set by e2e TestCrossSiteBrowser');
const sidecarPort = new URL(base).port;

const WAIT = { timeout: 20000 };

// Each vector targets a task of its own, so a grant names its way in.
const vectors = {
  iframe: (t) => `<iframe src="${base}/v1/leases/${t}/keepalive?owner=a&ttl_ms=600000"></iframe>`,
  img: (t) => `<img src="${base}/v1/leases/${t}/keepalive?owner=a&ttl_ms=600000">`,
  form: (t) => `<iframe name="sink"></iframe>
    <form id="f" method="POST" action="${base}/v1/leases/${t}/claim" enctype="text/plain" target="sink">
      <input name='{"owner":"a","ttl_ms":600000,"x":"' value='"}'></form>
    <script>document.getElementById('f').submit()</script>`,
  fetchPost: (t) => `<script>fetch("${base}/v1/leases/${t}/claim", {method: "POST", mode: "no-cors",
      headers: {"Content-Type": "text/plain"}, body: JSON.stringify({owner: "a", ttl_ms: 600000})}).catch(() => {})</script>`,
  fetchGet: (t) => `<script>fetch("${base}/v1/leases/${t}/keepalive?owner=a&ttl_ms=600000", {mode: "no-cors"}).catch(() => {})</script>`,
  eventSource: (t) => `<script>new EventSource("${base}/v1/leases/${t}/keepalive?owner=a&ttl_ms=600000")</script>`,
};

let browser;
let attacker;
let attackerPort;
before(async () => {
  browser = await launchChromium(executablePath, [
    // attacker.example resolves to the loopback address: the rebinding.
    '--host-resolver-rules=MAP attacker.example 127.0.0.1',
  ]);
  // The attacker's site: /<vector>/<task> is a page that tries that vector.
  attacker = http.createServer((req, res) => {
    const [, vector, task] = req.url.split('/');
    const body = vectors[vector] ? vectors[vector](task) : '';
    res.writeHead(200, { 'Content-Type': 'text/html' });
    res.end(`<!doctype html><html><body>${body}</body></html>`);
  });
  await new Promise((resolve) => attacker.listen(0, '127.0.0.1', resolve));
  attackerPort = attacker.address().port;
});
after(async () => {
  await browser?.close();
  attacker?.close();
});

async function api(method, path, body) {
  const res = await fetch(base + path, {
    method,
    headers: body ? { 'Content-Type': 'application/json' } : {},
    body: body ? JSON.stringify(body) : undefined,
  });
  return { status: res.status, body: await res.json() };
}

/** The sidecar's count of refusals for reason. */
async function refused(reason) {
  const text = await (await fetch(`${base}/metrics`)).text();
  const m = text.match(new RegExp(`^leasehold_http_refused_total\\{reason="${reason}"\\} (\\d+)$`, 'm'));
  return m ? Number(m[1]) : 0;
}

async function waitFor(what, f) {
  const deadline = Date.now() + WAIT.timeout;
  for (;;) {
    if (await f()) return;
    assert.ok(Date.now() < deadline, `timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Whether any of tasks has a history event: a grant got through. */
async function anyGranted(tasks) {
  for (const task of tasks) {
    if ((await api('GET', `/v1/leases/${task}/history`)).body.events?.length) return true;
  }
  return false;
}

/** No lease was granted on task, ever: not held, no history. */
async function assertUntouched(task) {
  const lease = await api('GET', `/v1/leases/${task}`);
  assert.equal(lease.status, 200);
  assert.deepEqual(lease.body, { held: false }, `${task} is held: ${JSON.stringify(lease.body)}`);
  const history = await api('GET', `/v1/leases/${task}/history`);
  assert.deepEqual(history.body.events, [], `${task} has history: ${JSON.stringify(history.body)}`);
}

// Two attacker origins: localhost is another site than 127.0.0.1
// (Sec-Fetch-Site: cross-site), 127.0.0.1 on another port the same site
// (same-site): both are other origins.
for (const origin of ['localhost', '127.0.0.1']) {
  test(`a page on http://${origin}:<port> cannot take a lease`, async (t) => {
    const context = await browser.newContext();
    t.after(() => context.close());
    const tasks = [];
    const before = await refused('cross_site');
    for (const vector of Object.keys(vectors)) {
      const task = `xs-${origin.replaceAll('.', '-')}-${vector}`;
      tasks.push(task);
      const page = await context.newPage();
      // Not waiting for the page's load: a keepalive stream in an iframe
      // never finishes loading when it is served.
      await page.goto(`http://${origin}:${attackerPort}/${vector}/${task}`, { waitUntil: 'commit' });
    }
    // Each vector's request reaches the sidecar and is refused there; the
    // count says when all have arrived, with no timer to guess. A grant
    // ends the wait too, and the checks below name it.
    await waitFor(`${tasks.length} cross-site refusals`,
      async () => (await refused('cross_site')) - before >= tasks.length || await anyGranted(tasks));
    for (const task of tasks) await assertUntouched(task);
  });
}

test('a page rebound to the sidecar address (DNS rebinding) is refused by its Host', async (t) => {
  const context = await browser.newContext();
  t.after(() => context.close());
  const page = await context.newPage();
  const before = await refused('host');
  const res = await page.goto(`http://attacker.example:${sidecarPort}/ui/`);
  assert.equal(res.status(), 421, 'the console under a foreign name');
  // The page's origin is now attacker.example:<sidecar port>: its calls are
  // same-origin for the browser, and only the Host tells them apart.
  const answers = await page.evaluate(async () => {
    const claim = await fetch('/v1/leases/xs-rebind/claim', {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ owner: 'a' }),
    });
    const list = await fetch('/v1/leases');
    return [claim.status, list.status];
  });
  assert.deepEqual(answers, [421, 421]);
  assert.ok(await refused('host') - before >= 3, 'the page load and both calls were refused by Host');
  await assertUntouched('xs-rebind');
});

test('the sidecar\'s own console still works', async (t) => {
  const context = await browser.newContext();
  t.after(() => context.close());
  const page = await context.newPage();
  const problems = [];
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => { if (m.type() === 'error') problems.push(`console error: ${m.text()}`); });
  await page.goto(`${base}/ui/`);
  const granted = await api('POST', '/v1/leases/console-check/claim', { owner: 'ops', ttl_ms: 60000 });
  assert.equal(granted.status, 200, JSON.stringify(granted.body));
  await page.locator('#leases tr[data-task="console-check"]').waitFor(WAIT);
  assert.deepEqual(problems, []);
});
