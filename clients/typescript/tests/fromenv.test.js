// LEASEHOLD_ADDR and LEASEHOLD_TOKEN_FILE, read as the leasehold binary reads them, so that a
// pod's app finds its sidecar with `new LeaseholdClient()`; and a token file read again when
// it is rotated.
import { test, beforeEach } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, renameSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LeaseholdClient, LeaseholdError, DEFAULT_ADDR } from "../index.js";
import { url, token } from "./env.js";

const dir = mkdtempSync(join(tmpdir(), "leasehold-ts-env-"));
let files = 0;

/** @param {string} content @returns {string} a new file holding content */
function tokenFile(content) {
  const path = join(dir, `token-${++files}`);
  writeFileSync(path, content);
  return path;
}

beforeEach(() => {
  delete process.env.LEASEHOLD_ADDR;
  delete process.env.LEASEHOLD_TOKEN_FILE;
});

/** @param {LeaseholdClient} c @param {string} task */
async function claimAndRelease(c, task) {
  const r = await c.claim(task, { owner: "ts-env", ttlMs: 30_000 });
  assert.equal(r.kind, "acquired", JSON.stringify(r));
  if (r.kind === "acquired") await c.release(task, { owner: "ts-env", token: r.lease.token });
}

test("with no options the client asks the sidecar LEASEHOLD_ADDR names, with LEASEHOLD_TOKEN_FILE's token", async () => {
  process.env.LEASEHOLD_ADDR = url;
  process.env.LEASEHOLD_TOKEN_FILE = tokenFile(`${token}\n`);
  const c = new LeaseholdClient();
  assert.equal(c.baseUrl, url);
  await claimAndRelease(c, "ts-env/both");
});

test("an address not given is LEASEHOLD_ADDR's; a token given is sent instead of the file's", async () => {
  process.env.LEASEHOLD_ADDR = url;
  process.env.LEASEHOLD_TOKEN_FILE = tokenFile("not-the-token\n");
  await claimAndRelease(new LeaseholdClient({ token }), "ts-env/addr");
  // The file's token is the wrong one: the sidecar refuses it, so the file was what was sent.
  await assert.rejects(new LeaseholdClient().claim("ts-env/addr", { owner: "ts-env" }), (err) => {
    assert.ok(err instanceof LeaseholdError);
    assert.equal(err.status, 401);
    assert.doesNotMatch(err.message, /not-the-token/, "the token is never in an error");
    return true;
  });
});

test("a token not given is LEASEHOLD_TOKEN_FILE's, whatever baseUrl", async () => {
  process.env.LEASEHOLD_TOKEN_FILE = tokenFile(`  ${token}  \n`);
  await claimAndRelease(new LeaseholdClient({ baseUrl: url }), "ts-env/token");
});

test("with neither set, the default address and no token", async () => {
  const c = new LeaseholdClient();
  assert.equal(c.baseUrl, DEFAULT_ADDR);
  assert.equal(DEFAULT_ADDR, "http://127.0.0.1:7411");
  // An address in the environment that is no address is refused, naming the variable.
  process.env.LEASEHOLD_ADDR = "unix:";
  assert.throws(() => new LeaseholdClient(), /LEASEHOLD_ADDR/);
});

test("a token file that is missing, empty or not one word is refused at construction, never quoted", () => {
  for (const [name, path] of [
    ["missing", join(dir, "no-such-token")],
    ["empty", tokenFile(" \n")],
    ["two words", tokenFile("secret-one secret-two\n")],
  ]) {
    process.env.LEASEHOLD_TOKEN_FILE = path;
    assert.throws(
      () => new LeaseholdClient({ baseUrl: url }),
      (err) => {
        assert.ok(err instanceof Error, name);
        assert.match(err.message, new RegExp(`token file ${path}`), name);
        assert.doesNotMatch(err.message, /secret-one/, `${name}: the content is never quoted`);
        return true;
      },
      name,
    );
    assert.throws(() => new LeaseholdClient({ baseUrl: url, tokenFile: path }), /token file/, name);
  }
});

test("a token file rotated between calls: the next request sends the new token", async () => {
  const path = tokenFile("the-old-token\n");
  process.env.LEASEHOLD_TOKEN_FILE = path;
  const c = new LeaseholdClient({ baseUrl: url });
  await assert.rejects(c.claim("ts-env/rotated", { owner: "ts-env" }), (err) => err instanceof LeaseholdError && err.status === 401);
  // Rewritten in place.
  writeFileSync(path, `${token}\n`);
  await claimAndRelease(c, "ts-env/rotated");
  // Replaced by a rename, as a Kubernetes Secret's volume does.
  const next = join(dir, "next");
  writeFileSync(next, "the-revoked-token\n");
  renameSync(next, path);
  await assert.rejects(c.claim("ts-env/rotated", { owner: "ts-env" }), (err) => err instanceof LeaseholdError && err.status === 401);
  writeFileSync(next, `${token}\n`);
  renameSync(next, path);
  await claimAndRelease(c, "ts-env/rotated");
  // A keepalive stream sends the file's token too.
  const k = await c.keepalive("ts-env/rotated", { owner: "ts-env", ttlMs: 5_000 });
  assert.equal(k.kind, "acquired");
  if (k.kind === "acquired") await k.holder.release();
});

test("a token file that goes missing keeps the last token read", async () => {
  const path = tokenFile(`${token}\n`);
  const c = new LeaseholdClient({ baseUrl: url, tokenFile: path });
  renameSync(path, join(dir, "moved"));
  await claimAndRelease(c, "ts-env/gone");
});
