// The web console in headless Chromium while its sidecar's SQLite store is
// restored from an older copy, run by TestConsoleFollowsRestore in
// e2e/console_test.go: the sidecar at LEASEHOLD_CONSOLE_URL (no token)
// holds rs-lost, which the older copy does not; POST /restore to
// LEASEHOLD_CONSOLE_CONTROL stops it, puts the copy back and starts it
// again on the same address. The page must start over: say so, drop
// rs-lost, and follow what happens next through the watch stream, although
// the ids of the new events are ones it has seen before.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { launchChromium } from './browser.js';

const base = process.env.LEASEHOLD_CONSOLE_URL;
const control = process.env.LEASEHOLD_CONSOLE_CONTROL;
const executablePath = process.env.LEASEHOLD_CHROMIUM;
assert.ok(base && control && executablePath, 'LEASEHOLD_CONSOLE_URL, LEASEHOLD_CONSOLE_CONTROL and LEASEHOLD_CHROMIUM are set by e2e/console_test.go');

const WAIT = { timeout: 20000 };
const RESTART = { timeout: 60000 }; // the sidecar restarts, the page reconnects with backoff

const row = (page, table, task) => page.locator(`#${table} tr[data-task="${task}"]`);
const connection = (page) => page.locator('#connection').textContent();

test('the console starts over when the store is restored under it', async (t) => {
  const browser = await launchChromium(executablePath);
  t.after(() => browser.close());
  const page = await browser.newPage();
  const problems = [];
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => {
    // While the sidecar restarts, requests fail or meet a sidecar that is not ready yet: the page handles those.
    if (m.type() === 'error' && !/ERR_CONNECTION_REFUSED|ERR_EMPTY_RESPONSE|ERR_CONNECTION_RESET|status of 50[03]/.test(m.text())) {
      problems.push(`console error: ${m.text()}`);
    }
  });
  await page.goto(`${base}/ui/`);
  await row(page, 'lease-rows', 'rs-lost').waitFor(WAIT);
  await page.waitForFunction(() => /Live: following the watch stream/.test(document.getElementById('connection').textContent), null, WAIT);
  // Everything the connection line says from now on, each text as it was
  // put there: several may come and go before an observer runs.
  await page.evaluate(() => {
    window.said = [];
    new MutationObserver((records) => {
      for (const r of records) {
        const text = [...r.addedNodes].map((n) => n.textContent).join('');
        if (text) window.said.push(text);
      }
    }).observe(document.getElementById('connection'), { childList: true });
  });

  const r = await fetch(`${control}/restore`, { method: 'POST' });
  assert.equal(r.status, 200, `restore: ${await r.text()}`);

  // Following the restored sidecar's watch stream again (the observer saw
  // only what the page said since the restore began).
  await page.waitForFunction(() => window.said.some((s) => /Live: following the watch stream/.test(s)), null, RESTART);
  await row(page, 'lease-rows', 'rs-lost').waitFor({ state: 'detached', ...WAIT });

  // A claim after the restore reaches the page through the watch stream.
  const res = await fetch(`${base}/v1/leases/rs-after/claim`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ owner: 'after-restore', ttl_ms: 600000 }),
  });
  assert.equal(res.status, 200, `claim rs-after: ${await res.text()}`);
  await row(page, 'lease-rows', 'rs-after').waitFor(WAIT)
    .catch(async (e) => { throw new Error(`rs-after never showed; the page says ${await connection(page)}: ${e.message}`); });
  // Everything the page said, not only its last line: a later status may
  // replace this one before a poll of the line itself sees it.
  await page.waitForFunction(() => window.said.some((s) => /Live: acquired rs-after/.test(s)), null, WAIT);
  const said = await page.evaluate(() => window.said);
  assert.ok(said.some((s) => /history went back/.test(s)), `the page said the history went back: ${JSON.stringify(said)}`);
  assert.deepEqual(problems, [], 'no script errors');
});
