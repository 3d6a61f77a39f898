// @ts-check
// Claim nightly-report, renew and release it, then hold it over a keepalive stream while a job
// runs, with the TypeScript client as another project uses it: package.json depends on
// "@leasehold/client": "file:../../clients/typescript"; `npm install`, then `node main.js`.
// It asks the sidecar at LEASEHOLD_ADDR (default http://127.0.0.1:7411), with the bearer token
// in LEASEHOLD_TOKEN_FILE when that is set (a `make run` sidecar wants none): with no options,
// the client reads both, as the leasehold binary does.
import { LeaseholdClient, defaultOwner } from "@leasehold/client";

const leasehold = new LeaseholdClient(); // LEASEHOLD_ADDR, LEASEHOLD_TOKEN_FILE
const task = "nightly-report";
const owner = defaultOwner(); // <hostname>#<pid>#<random>

/** Hands the fencing token to what the job writes to, and writes nothing once the lease is lost. */
async function writeReport({ fencingToken, signal }) {
  signal?.throwIfAborted();
  console.log(`report written under fencing token ${fencingToken}`);
}

const r = await leasehold.claim(task, { owner, ttlMs: 30_000 });
switch (r.kind) {
  case "acquired": // r.lease: {task, owner, token, expiresAt, ttlMs, ttlRemainingMs, renewCount, …}
    try {
      await writeReport({ fencingToken: r.lease.token });
      const renewed = await leasehold.renew(task, { owner, token: r.lease.token }); // renewed | lost | unavailable
      console.log(`renew: ${renewed.kind}`);
    } finally {
      await leasehold.release(task, { owner, token: r.lease.token }); // released | unavailable; also on a throw
    }
    break;
  case "held": // r.holder: {owner, expiresAt, ttlRemainingMs}
    console.log(`held: ${r.detail}`);
    break;
  case "unavailable": // r.detail: the sidecar or its store could not answer
    console.log(`nobody knows: ${r.detail}`);
    break;
}

// Hold the lease over a keepalive stream while a body runs; the signal aborts when the lease is lost.
const out = await leasehold.run(task, async (lease, signal) => {
  await writeReport({ fencingToken: lease.token, signal });
  return "done";
}, { owner, ttlMs: 10_000 });
console.log(out.kind === "ran" ? out.value : `${out.kind}: ${out.detail}`); // ran | held | unavailable
