// A tenant's web page must not get the console's token (issue 11, finding 1), in a real
// browser: Chromium, headless, driven by puppeteer-core, against the daemon (with --vhost)
// that tests/integration/test_web_isolation.py starts. The victim signs in to the console at
// http://<vhost>:<port>/ui, then opens, in the same tab, the page of another user's public
// sandbox: through the path proxy on the console's own origin, and on the sandbox's own
// subdomain. The page's script looks for a token in the storage it can reach, calls the API
// with it, and reports what it found to its own server; the test reads those reports.
//
// Environment: SANDBOXER_URL (the daemon), SANDBOXER_TOKEN (the victim, an admin),
// SANDBOXER_OWNER_TOKEN (the page's owner), SANDBOXER_VHOST, SANDBOXER_EVIL_ID and
// SANDBOXER_EVIL_NAME (the page's sandbox), CHROMIUM, SANDBOXER_WEB_TMP.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';

import puppeteer from 'puppeteer-core';

const env = process.env;
const URL_ = env.SANDBOXER_URL;
const TOKEN = env.SANDBOXER_TOKEN;
const OWNER = env.SANDBOXER_OWNER_TOKEN;
const VHOST = env.SANDBOXER_VHOST;
const ID = env.SANDBOXER_EVIL_ID;
const NAME = env.SANDBOXER_EVIL_NAME;
const STEP = 60_000;

assert.ok(URL_ && TOKEN && OWNER && VHOST && ID && NAME, 'the environment of test_web_isolation.py');
const PORT = new URL(URL_).port;
const CONSOLE = `http://${VHOST}:${PORT}`; // the API's and the console's origin
const SANDBOX = `http://${NAME}.${VHOST}:${PORT}`; // the tenant's own origin
const TOKEN_RE = /sbx(_|%5f)[0-9a-f]{64}/i;

// What the tenant's server saw: the paths asked for and the page's reports.
async function tenantLog() {
  const r = await fetch(`${URL_}/sandboxes/${ID}/proxy/reports`, {
    headers: { Authorization: `Bearer ${OWNER}` },
    signal: AbortSignal.timeout(STEP),
  });
  assert.equal(r.status, 200);
  return r.json();
}

let browser;
let profile;
let page;
let cdp;
const problems = [];

before(async () => {
  profile = mkdtempSync(join(env.SANDBOXER_WEB_TMP || tmpdir(), 'chromium-'));
  browser = await puppeteer.launch({
    executablePath: env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    pipe: true,
    userDataDir: profile,
    timeout: STEP,
    protocolTimeout: STEP * 3,
    args: [
      '--no-sandbox', // we run as root
      '--disable-gpu',
      '--disable-dev-shm-usage',
      '--no-first-run',
      '--no-default-browser-check',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--disable-features=HttpsUpgrades',
      // the vhost and its subdomains are the daemon; nothing else resolves
      `--host-resolver-rules=MAP ${VHOST} 127.0.0.1, MAP *.${VHOST} 127.0.0.1, ` +
        'MAP * ~NOTFOUND, EXCLUDE 127.0.0.1',
    ],
  });
  page = await browser.newPage();
  page.setDefaultTimeout(STEP);
  page.on('request', (r) => {
    const u = new URL(r.url());
    if (u.hostname !== VHOST && !u.hostname.endsWith(`.${VHOST}`) && u.protocol !== 'data:')
      problems.push(`request to ${r.url()}`);
  });
  cdp = await page.createCDPSession();
});

after(async () => {
  if (browser) await Promise.race([browser.close(), new Promise((r) => setTimeout(r, 20_000))]);
  if (browser?.process() && browser.process().exitCode === null) browser.process().kill('SIGKILL');
  if (profile) rmSync(profile, { recursive: true, force: true });
});

describe("a tenant's page and the console's token", { concurrency: 1 }, () => {
  test('the victim signs in to the console, which keeps the token', async () => {
    await page.goto(`${CONSOLE}/ui`, { waitUntil: 'load' });
    await page.waitForSelector('#token', { visible: true });
    await page.type('#token', TOKEN);
    await page.click('#remember');
    await page.click('#sign-in');
    await page.waitForSelector('#app', { visible: true });
    // the token is there to be stolen: in this tab's storage and in the browser's
    assert.equal(await page.evaluate(() => sessionStorage.getItem('sandboxer.token')), TOKEN);
    assert.equal(await page.evaluate(() => localStorage.getItem('sandboxer.token')), TOKEN);
  });

  test("on the console's origin the tenant's page runs no script", async () => {
    const res = await page.goto(`${CONSOLE}/sandboxes/${ID}/proxy/evil.html`, { waitUntil: 'load' });
    assert.equal(res.status(), 200);
    const log = await tenantLog();
    assert.ok(log.seen.includes('/evil.html'), JSON.stringify(log)); // it was served
    // its script reports synchronously before "load": nothing came, least of all the token
    assert.doesNotMatch(JSON.stringify(log), TOKEN_RE);
    assert.deepEqual(log.reports.filter((r) => r.origin === CONSOLE || r.origin === 'null'), []);
    assert.equal(res.headers()['content-security-policy'], 'sandbox');
  });

  test('on its own subdomain the page runs but reaches no token', async () => {
    const res = await page.goto(`${SANDBOX}/evil.html`, { waitUntil: 'load' });
    assert.equal(res.status(), 200);
    const log = await tenantLog();
    const mine = log.reports.filter((r) => r.origin === SANDBOX);
    assert.equal(mine.length, 1, JSON.stringify(log)); // scripts run on the tenant's origin
    assert.equal(mine[0].token, null);
    assert.doesNotMatch(mine[0].me, /^200/); // the API did not answer it as the victim
    assert.doesNotMatch(JSON.stringify(log), TOKEN_RE);
  });

  test('cookies the tenant sets for the parent domain are dropped', async () => {
    const { cookies } = await cdp.send('Network.getAllCookies');
    const seen = cookies.map((c) => `${c.name}@${c.domain}`).sort();
    // its own host keeps its cookies; the vhost (every tenant's and the console's) gets none
    assert.deepEqual(seen, [`host@${NAME}.${VHOST}`, `own@.${NAME}.${VHOST}`], seen.join(' '));
  });

  test('the console still signs the victim in: the token was there all along', async () => {
    await page.goto(`${CONSOLE}/ui`, { waitUntil: 'load' });
    await page.waitForSelector('#app', { visible: true });
    assert.equal(await page.evaluate(() => localStorage.getItem('sandboxer.token')), TOKEN);
    assert.deepEqual(problems, []);
  });
});
