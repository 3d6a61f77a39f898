// The web console in headless Chromium, against the sidecar that
// e2e/console_test.go starts (LEASEHOLD_CONSOLE_URL, behind the bearer
// token LEASEHOLD_CONSOLE_TOKEN, with tasks nightly-report, billing/invoices
// and telescope:prune declared and a retention policy audit). Claims and
// releases go through the API with fetch, as any client's would; the page
// must follow them.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { launchChromium } from './browser.js';

const base = process.env.LEASEHOLD_CONSOLE_URL;
const openBase = process.env.LEASEHOLD_CONSOLE_OPEN_URL; // the same store, served without a token
const viewerBase = process.env.LEASEHOLD_CONSOLE_VIEWER_URL; // the same store, for a credential with hold, not admin
const viewerToken = process.env.LEASEHOLD_CONSOLE_VIEWER_TOKEN;
const token = process.env.LEASEHOLD_CONSOLE_TOKEN;
const executablePath = process.env.LEASEHOLD_CHROMIUM;
const screenshot = process.env.LEASEHOLD_CONSOLE_SCREENSHOT;
assert.ok(base && token && executablePath, 'LEASEHOLD_CONSOLE_URL, LEASEHOLD_CONSOLE_TOKEN and LEASEHOLD_CHROMIUM are set by e2e/console_test.go');

const WAIT = { timeout: 20000 };
// The browser's clock runs this far behind the server's: the page must
// still count from the server's times.
const SKEW_MS = -37 * 60 * 1000;

let browser;
before(async () => {
  browser = await launchChromium(executablePath);
});
after(async () => { await browser?.close(); });

/** Calls the API as a client would. */
async function api(method, path, body) {
  const res = await fetch(base + path, {
    method,
    headers: { Authorization: `Bearer ${token}`, ...(body ? { 'Content-Type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const json = await res.json();
  return { status: res.status, body: json };
}

async function claim(task, owner, ttlMs, note) {
  const r = await api('POST', `/v1/leases/${encodeURIComponent(task)}/claim`, { owner, ttl_ms: ttlMs, note });
  assert.equal(r.status, 200, `claim ${task}: ${JSON.stringify(r.body)}`);
  return r.body.lease;
}

/** A page in a new context (its own sessionStorage), its clock skewed, its console errors collected. */
async function openPage(options = {}, url = base) {
  const context = await browser.newContext(options);
  await context.addInitScript((skew) => {
    const realNow = Date.now.bind(Date);
    Date.now = () => realNow() + skew;
  }, SKEW_MS);
  const page = await context.newPage();
  const problems = [];
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => {
    // 401s and the watch stream's 404 (until a sidecar has one) are answers the page handles.
    if (m.type() === 'error' && !/status of 40[14]/.test(m.text())) problems.push(`console error: ${m.text()}`);
  });
  await page.goto(`${url}/ui`); // redirected to /ui/
  return { context, page, problems };
}

async function enterToken(page, value) {
  await page.getByLabel('Bearer token').fill(value);
  await page.getByRole('button', { name: 'Use token' }).click();
}

function row(page, table, task) {
  return page.locator(`#${table} tr[data-task="${task}"]`);
}

test('the console: token prompt, leases with countdowns, history, policies, health', async (t) => {
  const { context, page, problems } = await openPage({ viewport: { width: 1280, height: 900 } });
  t.after(() => context.close());

  await t.test('served with a strict Content-Security-Policy', async () => {
    const res = await page.request.get(`${base}/ui/`);
    assert.match(res.headers()['content-security-policy'], /^default-src 'self';/);
    assert.doesNotMatch(res.headers()['content-security-policy'], /unsafe-inline/);
  });

  await t.test('asks for the token; refuses a wrong one; shows data with the right one', async () => {
    await page.locator('#token-panel').waitFor({ state: 'visible', ...WAIT });
    assert.equal(await page.getByLabel('Bearer token').getAttribute('type'), 'password');
    await enterToken(page, 'not-the-token');
    await page.waitForFunction(() => /refused/.test(document.getElementById('token-message').textContent), null, WAIT);
    assert.ok(await page.locator('#token-panel').isVisible(), 'a wrong token leaves the prompt up');
    assert.equal(await page.locator('#task-rows tr').count(), 0, 'no data without the token');

    await enterToken(page, token);
    await page.locator('#token-panel').waitFor({ state: 'hidden', ...WAIT });
    await row(page, 'task-rows', 'nightly-report').waitFor(WAIT);
    assert.ok(await page.getByRole('button', { name: 'Forget token' }).isVisible());
    assert.equal(await page.evaluate(() => sessionStorage.getItem('leasehold.token')), token);
  });

  await t.test('follows the watch stream (GET /v1/watch), not polling', async () => {
    await page.waitForFunction(() => /Live: following the watch stream/.test(document.getElementById('connection').textContent), null, WAIT);
  });

  await t.test('declared tasks, idle ones included, and the retention policies', async () => {
    const idle = row(page, 'task-rows', 'nightly-report');
    assert.match(await idle.textContent(), /idle/);
    assert.match(await idle.textContent(), /30 s/);
    assert.match(await idle.textContent(), /10 min/);
    assert.match(await idle.textContent(), /the nightly PDF report/);
    assert.match(await row(page, 'task-rows', 'billing/invoices').textContent(), /audit/);
    await page.locator('#policy-rows tr', { hasText: 'audit' }).waitFor(WAIT);
    assert.match(await page.locator('#policy-rows').textContent(), /90 d/);
    assert.match(await page.locator('#policy-rows').textContent(), /500 events/);
  });

  await t.test('the sidecar health (GET /v1/status): store ready, streams, watchers, batching', async () => {
    await page.waitForFunction(() => /ready/.test(document.getElementById('health-list').textContent), null, WAIT);
    const text = await page.locator('#health-list').textContent();
    assert.doesNotMatch(text, /not ready/);
    assert.match(text, /sqlite/);
    assert.match(text, /\d+ open of [\d,]+/);
    // This page's own watch stream is one of the sidecar's watchers (health is read every 10 s).
    await page.waitForFunction(() => /Watchers\s*[1-9]/.test(document.getElementById('health-list').textContent), null, WAIT);
    assert.match(await page.locator('#batching').textContent(), /claim/);
  });

  let lease;
  await t.test('a claim made through the API appears with owner, token and a countdown that decreases', async () => {
    lease = await claim('nightly-report', 'worker-a#4242#k3j9', 120000, 'rendering December');
    const r = row(page, 'lease-rows', 'nightly-report');
    await r.waitFor(WAIT);
    // The watch stream's event brought it.
    await page.waitForFunction(() => /Live: acquired nightly-report/.test(document.getElementById('connection').textContent), null, WAIT);
    assert.equal(await r.locator('.owner').textContent(), 'worker-a#4242#k3j9');
    assert.equal(await r.locator('.token').textContent(), String(lease.token));
    assert.match(await r.textContent(), /rendering December/);
    // The browser's clock is 37 minutes behind: times still read as just now.
    assert.match(await r.locator('.ago').first().textContent(), /just now|\d+ s ago/);
    const countdown = r.locator('.countdown');
    const first = Number(await countdown.getAttribute('data-remaining-ms'));
    assert.ok(first > 0 && first <= 120000, `countdown starts within the ttl: ${first} ms`);
    assert.match(await countdown.textContent(), /◷ (2 min 00 s|1 min \d\d s)/);
    await page.waitForFunction((before) => {
      const node = document.querySelector('#lease-rows tr[data-task="nightly-report"] .countdown');
      return node && Number(node.dataset.remainingMs) < before - 1000;
    }, first, WAIT);
    assert.match(await row(page, 'task-rows', 'nightly-report').textContent(), /held by worker-a#4242#k3j9/);
  });

  await t.test('a release shows in the task history', async () => {
    await row(page, 'task-rows', 'nightly-report').getByRole('button', { name: 'nightly-report' }).click();
    await page.locator('#history').waitFor({ state: 'visible', ...WAIT });
    await page.locator('#history-rows tr[data-kind="acquired"]').waitFor(WAIT);
    const r = await api('POST', '/v1/leases/nightly-report/release', { owner: 'worker-a#4242#k3j9', token: lease.token });
    assert.equal(r.body.released, true);
    await page.locator('#history-rows tr[data-kind="released"]').waitFor(WAIT);
    assert.match(await page.locator('#history-rows tr[data-kind="released"]').textContent(), /released.*worker-a#4242#k3j9/s);
    await row(page, 'lease-rows', 'nightly-report').waitFor({ state: 'detached', ...WAIT });
    assert.match(await row(page, 'task-rows', 'nightly-report').textContent(), /idle/);
  });

  await t.test('an expiry shows in the history with nobody claiming the task again', async () => {
    const short = await claim('telescope:prune', 'pruner-1#7#aa', 300, '');
    await row(page, 'task-rows', 'telescope:prune').getByRole('button', { name: 'telescope:prune' }).click();
    await page.waitForFunction(() => document.getElementById('history-task').textContent === 'telescope:prune', null, WAIT);
    // Wait (by the store's clock) until the short lease has run out.
    for (;;) {
      const got = await api('GET', '/v1/leases/telescope%3Aprune');
      if (!got.body.held) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    const expired = page.locator('#history-rows tr[data-kind="expired"]');
    await expired.waitFor(WAIT);
    assert.match(await expired.textContent(), /expired/);
    assert.equal(await expired.locator('.owner').textContent(), 'pruner-1#7#aa');
    assert.equal(await expired.locator('.token').textContent(), String(short.token));
    // Recorded by the sidecar when the lease ran out, for no credential.
    assert.equal(await expired.locator('td[data-label="Credential"]').textContent(), '—');
    await row(page, 'lease-rows', 'telescope:prune').waitFor({ state: 'detached', ...WAIT });

    const next = await claim('telescope:prune', 'pruner-2#9#bb', 90000, 'entries older than 30 d');
    await page.locator(`#history-rows tr[data-kind="acquired"]`, { hasText: 'pruner-2#9#bb' }).waitFor(WAIT);
    const held = row(page, 'lease-rows', 'telescope:prune');
    assert.equal(await held.locator('.owner').textContent(), 'pruner-2#9#bb');
    assert.equal(await held.locator('.token').textContent(), String(next.token));
  });

  await t.test('the history names the credential each event was recorded for', async () => {
    // e2e/console_test.go claimed and released billing/invoices for the credential billing-ci.
    await row(page, 'task-rows', 'billing/invoices').getByRole('button', { name: 'billing/invoices' }).click();
    await page.waitForFunction(() => document.getElementById('history-task').textContent === 'billing/invoices', null, WAIT);
    for (const kind of ['acquired', 'released']) {
      const ev = page.locator(`#history-rows tr[data-kind="${kind}"]`);
      await ev.waitFor(WAIT);
      assert.equal(await ev.locator('td[data-label="Credential"] .credential').textContent(), 'billing-ci');
    }
  });

  await t.test('the selected task is in the URL: reload, back and forward keep it', async () => {
    await row(page, 'task-rows', 'nightly-report').getByRole('button', { name: 'nightly-report' }).click();
    await page.waitForFunction(() => document.getElementById('history-task').textContent === 'nightly-report', null, WAIT);
    assert.equal(new URL(page.url()).hash, '#task=nightly-report');
    await page.reload();
    await page.waitForFunction(() => document.getElementById('history-task').textContent === 'nightly-report', null, WAIT);
    assert.ok(await page.locator('#history').isVisible(), 'the history is shown after a reload');
    await page.locator('#history-rows tr[data-kind="released"]').waitFor(WAIT);
    assert.equal(await row(page, 'task-rows', 'nightly-report').getAttribute('aria-current'), 'true');

    await row(page, 'task-rows', 'billing/invoices').getByRole('button', { name: 'billing/invoices' }).click();
    await page.waitForFunction(() => document.getElementById('history-task').textContent === 'billing/invoices', null, WAIT);
    assert.equal(new URL(page.url()).hash, '#task=billing%2Finvoices');
    await page.goBack();
    await page.waitForFunction(() => document.getElementById('history-task').textContent === 'nightly-report', null, WAIT);
    await page.goForward();
    await page.waitForFunction(() => document.getElementById('history-task').textContent === 'billing/invoices', null, WAIT);
    await page.getByRole('button', { name: 'Close history' }).click();
    assert.equal(await page.locator('#history').isVisible(), false);
    assert.equal(new URL(page.url()).hash, '');
    await page.goBack();
    await page.waitForFunction(() => document.getElementById('history-task').textContent === 'billing/invoices' &&
      !document.getElementById('history').hidden, null, WAIT);
  });

  await t.test('the history of a task neither held nor declared: by name, and by link', async () => {
    // gone/once was held and released; it is in no table now.
    const l = await claim('gone/once', 'one-off#1#zz', 60000, '');
    const r = await api('POST', '/v1/leases/gone%2Fonce/release', { owner: 'one-off#1#zz', token: l.token });
    assert.equal(r.body.released, true);
    await row(page, 'task-rows', 'gone/once').waitFor({ state: 'detached', ...WAIT });
    await page.getByLabel('Any task\'s history').fill('gone/once');
    await page.getByRole('button', { name: 'Show history' }).click();
    await page.waitForFunction(() => document.getElementById('history-task').textContent === 'gone/once', null, WAIT);
    await page.locator('#history-rows tr[data-kind="released"]').waitFor(WAIT);
    assert.equal(await page.locator('#history-rows tr').count(), 2);
    assert.equal(new URL(page.url()).hash, '#task=gone%2Fonce');

    // A link to it, in a new tab (whose sessionStorage holds no token: the
    // history shows once the token is given).
    const other = await context.newPage();
    await other.goto(`${base}/ui/#task=gone%2Fonce`);
    await enterToken(other, token);
    await other.waitForFunction(() => document.getElementById('history-task').textContent === 'gone/once', null, WAIT);
    await other.locator('#history-rows tr[data-kind="acquired"]').waitFor(WAIT);
    await other.close();
  });

  await t.test('force release: offered to an admin for a held task, confirmed, recorded as an operator\'s', async () => {
    const held = await claim('stuck/job', 'stuck-worker#9#dd', 600000, 'hung');
    await row(page, 'task-rows', 'stuck/job').getByRole('button', { name: 'stuck/job' }).click();
    await page.waitForFunction(() => document.getElementById('history-task').textContent === 'stuck/job', null, WAIT);
    const force = page.getByRole('button', { name: 'Force release…' });
    await force.waitFor(WAIT);

    // Cancelled: nothing happens.
    await force.click();
    const dialog = page.getByRole('dialog');
    await dialog.waitFor(WAIT);
    assert.match(await dialog.textContent(), new RegExp(`stuck-worker#9#dd \\(token ${held.token}\\)`));
    await dialog.getByRole('button', { name: 'Cancel' }).click();
    await dialog.waitFor({ state: 'hidden', ...WAIT });
    assert.equal((await api('GET', '/v1/leases/stuck%2Fjob')).body.held, true, 'a cancelled force release ends nothing');

    // Confirmed: the lease ends, and the history says an operator ended it.
    await force.click();
    await dialog.getByRole('button', { name: 'Release it' }).click();
    await page.waitForFunction(() => /Released: ended the lease of stuck-worker#9#dd/.test(document.getElementById('history-note').textContent), null, WAIT);
    assert.equal((await api('GET', '/v1/leases/stuck%2Fjob')).body.held, false);
    const ev = page.locator('#history-rows tr[data-kind="released"]');
    await ev.waitFor(WAIT);
    assert.equal(await ev.locator('.owner').textContent(), 'stuck-worker#9#dd');
    assert.equal(await ev.locator('td[data-label="Credential"] .credential').textContent(), 'token');
    assert.equal(await ev.locator('td[data-label="Detail"]').textContent(), 'revoked by an operator');
    await row(page, 'lease-rows', 'stuck/job').waitFor({ state: 'detached', ...WAIT });
    await force.waitFor({ state: 'hidden', ...WAIT });
  });

  await t.test('a task\'s runs: the last run, the last success, the last failure', async () => {
    // Four hourly runs as leasehold run reports them with its releases.
    const runs = [
      { owner: 'web-1#311#a1', run: { exit_code: 0, duration_ms: 61_000 } },
      { owner: 'web-2#412#b2', run: { exit_code: 0, duration_ms: 58_500 } },
      { owner: 'web-3#513#c3', run: { exit_code: 2, duration_ms: 4_200 } },
      { owner: 'web-1#311#a1', run: { exit_code: 0, duration_ms: 63_000 } },
    ];
    for (const r of runs) {
      const lease = await claim('reports/hourly', r.owner, 60000);
      const rel = await api('POST', '/v1/leases/reports%2Fhourly/release', { owner: r.owner, token: lease.token, run: r.run });
      assert.equal(rel.body.released, true, JSON.stringify(rel.body));
    }
    await page.getByLabel('Any task\'s history').fill('reports/hourly');
    await page.getByRole('button', { name: 'Show history' }).click();
    await page.waitForFunction(() => document.getElementById('history-task').textContent === 'reports/hourly', null, WAIT);
    await page.locator('#runs').waitFor({ state: 'visible', ...WAIT });
    const fact = (id) => page.locator(`#${id} dd`).textContent();
    assert.match(await fact('run-last'), /succeeded in 1 min 03 s, .* by web-1#311#a1 \(token 4\)/);
    assert.match(await fact('run-success'), /succeeded in 1 min 03 s, .* by web-1#311#a1 \(token 4\)/);
    assert.match(await fact('run-failure'), /failed \(exit 2\) in 4 s, .* by web-3#513#c3 \(token 3\)/);
    assert.match(await page.locator('#runs-facts').textContent(), /4: 3 succeeded, 1 failed, 0 lost/);
    const released = page.locator('#history-rows tr[data-kind="released"]').first();
    assert.match(await released.locator('td[data-label="Detail"]').textContent(), /^run succeeded in 1 min 03 s$/);
    // A failure after: the last run and the last failure move, the last success stays.
    const lease = await claim('reports/hourly', 'web-2#412#b2', 60000);
    await api('POST', '/v1/leases/reports%2Fhourly/release', { owner: 'web-2#412#b2', token: lease.token, run: { error: 'killed by signal 9 (killed)', duration_ms: 900 } });
    await page.waitForFunction(() => /token 5/.test(document.querySelector('#run-last dd')?.textContent ?? ''), null, WAIT);
    assert.match(await fact('run-failure'), /failed \(killed by signal 9 \(killed\)\) in 900 ms, .* by web-2#412#b2 \(token 5\)/);
    assert.match(await fact('run-success'), /by web-1#311#a1 \(token 4\)/);
  });

  await t.test('a screenshot of the console, when asked for', async (st) => {
    if (!screenshot) {
      st.diagnostic('LEASEHOLD_CONSOLE_SCREENSHOT is not set: no screenshot taken');
      return;
    }
    // The runs view of the task above, then the whole console.
    await page.locator('#history').screenshot({ path: screenshot.replace(/\.png$/, '-runs.png') });
    await claim('billing/invoices', 'billing-7f9c#1#q2', 110000, 'December invoices');
    await row(page, 'lease-rows', 'billing/invoices').waitFor(WAIT);
    await page.screenshot({ path: screenshot, fullPage: true });
  });

  await t.test('forget token: the prompt is back, the token gone from the tab', async () => {
    await page.getByRole('button', { name: 'Forget token' }).click();
    await page.locator('#token-panel').waitFor({ state: 'visible', ...WAIT });
    assert.equal(await page.evaluate(() => sessionStorage.getItem('leasehold.token')), null);
    assert.match(await page.locator('#token-message').textContent(), /requires a bearer token/);
    assert.equal(await page.locator('#lease-rows tr').count(), 0, 'no data left on the page');
    assert.equal(await page.locator('#task-rows tr').count(), 0, 'no tasks left on the page');
    assert.equal(await page.locator('#history').isVisible(), false, 'no history left on the page');
    assert.doesNotMatch(await page.locator('#health-list').textContent(), /sqlite/, 'no status left on the page');
  });

  assert.deepEqual(problems, [], 'no script errors');
});

test('a sidecar without a token: no prompt, the shared store\'s data at once', async (t) => {
  const { context, page, problems } = await openPage({ viewport: { width: 1024, height: 768 } }, openBase);
  t.after(() => context.close());
  assert.equal(page.url(), `${openBase}/ui/`);
  await row(page, 'task-rows', 'nightly-report').waitFor(WAIT);
  await page.waitForFunction(() => /Live/.test(document.getElementById('connection').textContent), null, WAIT);
  assert.equal(await page.locator('#token-panel').isVisible(), false);
  assert.equal(await page.getByRole('button', { name: 'Forget token' }).isVisible(), false);
  // A claim made through the other sidecar (another process on the same store) shows here too.
  await claim('cross/process', 'elsewhere#1#cc', 60000, '');
  await row(page, 'lease-rows', 'cross/process').waitFor(WAIT);
  assert.deepEqual(problems, [], 'no script errors');
});

test('a credential without the admin right is offered no force release', async (t) => {
  const { context, page, problems } = await openPage({ viewport: { width: 1024, height: 768 } }, viewerBase);
  t.after(() => context.close());
  await claim('viewer/held', 'someone#1#vv', 600000, '');
  await enterToken(page, viewerToken);
  await row(page, 'lease-rows', 'viewer/held').waitFor(WAIT);
  await page.waitForFunction(() => /ready/.test(document.getElementById('health-list').textContent), null, WAIT);
  await row(page, 'task-rows', 'viewer/held').getByRole('button', { name: 'viewer/held' }).click();
  await page.locator('#history-rows tr[data-kind="acquired"]').waitFor(WAIT);
  assert.equal(await page.locator('#force-release').isVisible(), false, 'no force release for a hold credential');
  assert.deepEqual(problems, [], 'no script errors');
});

test('phone-sized screen: one column, no horizontal scroll', async (t) => {
  const { context, page, problems } = await openPage({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true });
  t.after(() => context.close());
  await claim('reports/weekly-digest', 'a-very-long-owner-name-without-any-breaks-0123456789abcdef#4242#zz', 60000, 'a note long enough to wrap on a narrow screen, with no place to scroll sideways');
  await enterToken(page, token);
  await row(page, 'lease-rows', 'reports/weekly-digest').waitFor(WAIT);
  await row(page, 'task-rows', 'reports/weekly-digest').getByRole('button', { name: 'reports/weekly-digest' }).click();
  await page.locator('#history-rows tr').first().waitFor(WAIT);
  const widths = await page.evaluate(() => ({
    scroll: document.documentElement.scrollWidth,
    client: document.documentElement.clientWidth,
    columns: getComputedStyle(document.querySelector('main')).gridTemplateColumns.split(' ').length,
  }));
  assert.ok(widths.scroll <= widths.client, `no horizontal overflow: scrollWidth ${widths.scroll} > clientWidth ${widths.client}`);
  assert.equal(widths.columns, 1, 'one column');
  // Cells name their column where the table head is hidden.
  const label = await page.locator('#lease-rows td').first().evaluate((td) => getComputedStyle(td, '::before').content);
  assert.equal(label, '"Task"');
  assert.deepEqual(problems, [], 'no script errors');
});

/** The WCAG contrast ratio of two CSS rgb() colours. */
function contrast(a, b) {
  const lum = (css) => {
    const [r, g, bl] = css.match(/[\d.]+/g).slice(0, 3).map(Number).map((v) => {
      const c = v / 255;
      return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
    });
    return 0.2126 * r + 0.7152 * g + 0.0722 * bl;
  };
  const [hi, lo] = [lum(a), lum(b)].sort((x, y) => y - x);
  return (hi + 0.05) / (lo + 0.05);
}

test('dark mode: dark background, readable text', async (t) => {
  const { context, page, problems } = await openPage({ viewport: { width: 1024, height: 768 }, colorScheme: 'dark' });
  t.after(() => context.close());
  await page.emulateMedia({ colorScheme: 'dark' });
  await enterToken(page, token);
  await row(page, 'task-rows', 'nightly-report').waitFor(WAIT);
  const colours = await page.evaluate(() => {
    const style = (sel) => getComputedStyle(document.querySelector(sel));
    return {
      body: [style('body').color, style('body').backgroundColor],
      panel: [style('#tasks').color, style('#tasks').backgroundColor],
      muted: [style('#tasks .hint').color, style('#tasks').backgroundColor],
      idle: [style('#task-rows .state.idle').color, style('#tasks').backgroundColor],
      link: [style('#task-rows button.link').color, style('#tasks').backgroundColor],
    };
  });
  const bg = colours.body[1].match(/[\d.]+/g).slice(0, 3).map(Number);
  assert.ok(bg.every((v) => v < 60), `dark background: ${colours.body[1]}`);
  for (const [what, [fg, back]] of Object.entries(colours)) {
    const ratio = contrast(fg, back);
    assert.ok(ratio >= 4.5, `${what}: contrast ${ratio.toFixed(2)} of ${fg} on ${back} is under 4.5`);
  }
  assert.deepEqual(problems, [], 'no script errors');
});
