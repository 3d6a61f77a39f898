// launchChromium starts the system's headless Chromium (LEASEHOLD_CHROMIUM)
// with the flags every console test uses, and extra ones. On a loaded
// machine Chromium now and then dies while starting (a SIGSEGV before its
// first page, seen in CI); that is Chromium's start, not the console under
// test, so a launch that fails is tried again, twice, saying so. A browser
// that started and then fails fails its test.
import { chromium } from 'playwright-core';

const FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'];
const ATTEMPTS = 3;

export async function launchChromium(executablePath, extraArgs = []) {
  for (let attempt = 1; ; attempt++) {
    try {
      return await chromium.launch({ executablePath, args: [...FLAGS, ...extraArgs] });
    } catch (e) {
      if (attempt === ATTEMPTS) throw e;
      console.error(`Chromium did not start (attempt ${attempt} of ${ATTEMPTS}), trying again: ${e.message.split('\n')[0]}`);
    }
  }
}
