// The web console (/ui) in a real browser: Chromium, headless, driven by puppeteer-core,
// against the daemon that tests/integration/test_web.py starts. It passes, in the
// environment: SANDBOXER_URL, SANDBOXER_TOKEN (an admin), SANDBOXER_OTHER_TOKEN (another
// user), CHROMIUM (the browser) and SANDBOXER_WEB_TMP (where the browser's profile goes).
// The tests run in order and build on each other (create → exec → terminal → fork → ...).
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';

import puppeteer from 'puppeteer-core';

const URL_ = process.env.SANDBOXER_URL;
const TOKEN = process.env.SANDBOXER_TOKEN;
const OTHER = process.env.SANDBOXER_OTHER_TOKEN;
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const STEP = 60_000; // one wait in the page
const SLOW = 180_000; // a test that creates, forks or hibernates

assert.ok(URL_ && TOKEN && OTHER, 'SANDBOXER_URL, SANDBOXER_TOKEN and SANDBOXER_OTHER_TOKEN');
const ORIGIN = new URL(URL_).origin;

async function api(method, path, body, token = TOKEN) {
  const res = await fetch(URL_ + path, {
    method,
    headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(SLOW),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null };
}

let browser;
let profile;
const pages = []; // every page, for the checks at the end
const problems = []; // script errors and requests that left the daemon

async function newPage() {
  const ctx = await browser.createBrowserContext(); // own storage: a separate "browser"
  const page = await ctx.newPage();
  page.setDefaultTimeout(STEP);
  page.on('pageerror', (e) => problems.push(`script error: ${e.message}`));
  page.on('request', (r) => {
    const u = r.url();
    if (!u.startsWith(`${ORIGIN}/`) && !u.startsWith('data:')) problems.push(`request to ${u}`);
  });
  pages.push(page);
  return page;
}

async function signIn(page, token, { remember = false } = {}) {
  await page.goto(`${URL_}/`, { waitUntil: 'load' }); // follows the redirect to /ui
  assert.equal(new URL(page.url()).pathname, '/ui');
  await page.waitForSelector('#token', { visible: true });
  await page.type('#token', token);
  if (remember) await page.click('#remember');
  await page.click('#sign-in');
}

// The row of the sandbox with this label, once its status is status (null: any).
async function waitRow(page, label, status = null, timeout = STEP) {
  const h = await page.waitForFunction(
    (l, s) => [...document.querySelectorAll('#sandbox-rows tr')].find(
      (tr) => tr.cells[2].textContent === l && (s === null || tr.cells[4].textContent === s)),
    { timeout }, label, status);
  return h.asElement();
}

const rowLabels = (page) =>
  page.$$eval('#sandbox-rows tr', (trs) => trs.map((tr) => tr.cells[2].textContent));
const text = (page, sel) => page.$eval(sel, (e) => e.textContent);

async function selectRow(page, label) {
  const row = await waitRow(page, label);
  await row.click();
  await page.waitForFunction((l) => document.querySelector('#detail-title')?.textContent
    .startsWith(l), {}, label);
  return page.evaluate((e) => e.dataset.id, row);
}

// Waits for a button to be enabled (the list refreshes every 2 s), then clicks it.
async function clickWhenEnabled(page, sel) {
  await page.waitForFunction((s) => !document.querySelector(s).disabled, {}, sel);
  await page.click(sel);
}

async function deleteAll(token) {
  const r = await api('GET', '/sandboxes', undefined, token).catch(() => null);
  for (const s of r?.body?.sandboxes || [])
    if (s.status !== 'terminated')
      await api('DELETE', `/sandboxes/${s.id}`, undefined, token).catch(() => {});
}

before(async () => {
  profile = mkdtempSync(join(process.env.SANDBOXER_WEB_TMP || tmpdir(), 'chromium-'));
  browser = await puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    pipe: true, // no debugging port
    userDataDir: profile,
    timeout: STEP,
    protocolTimeout: SLOW,
    args: [
      '--no-sandbox', // we run as root
      '--disable-gpu',
      '--disable-dev-shm-usage',
      '--no-first-run',
      '--no-default-browser-check',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-domain-reliability',
      '--disable-sync',
      '--no-pings',
      // nothing leaves 127.0.0.1, whatever the browser would like to fetch on its own
      '--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1',
      '--window-size=1400,1000',
    ],
    defaultViewport: { width: 1400, height: 1000 },
  });
});

after(async () => {
  try {
    if (browser) await Promise.race([browser.close(), new Promise((r) => setTimeout(r, 20_000))]);
    if (browser?.process() && browser.process().exitCode === null) browser.process().kill('SIGKILL');
  } finally {
    await deleteAll(TOKEN);
    await deleteAll(OTHER);
    if (profile) rmSync(profile, { recursive: true, force: true });
  }
});

describe('web console', { concurrency: 1 }, () => {
  let admin; // the admin's signed-in page, shared by the tests below

  test('a wrong token shows an error and no list', { timeout: SLOW }, async () => {
    const page = await newPage();
    await signIn(page, `sbx_${'0'.repeat(64)}`);
    await page.waitForSelector('#login-error', { visible: true });
    assert.match(await text(page, '#login-error'), /invalid token/);
    assert.equal(await page.$eval('#app', (e) => e.hidden), true);
    assert.equal(await page.$eval('#login', (e) => e.hidden), false);
    assert.deepEqual(await rowLabels(page), []);
    assert.equal(await page.evaluate(() => sessionStorage.length + localStorage.length), 0);
    await page.close();
  });

  test("the right token shows the user's sandboxes", { timeout: SLOW }, async () => {
    const made = await api('POST', '/sandboxes', { image: 'busybox', label: 'web-premade' });
    assert.equal(made.status, 200, JSON.stringify(made.body));
    admin = await newPage();
    await signIn(admin, TOKEN);
    await admin.waitForSelector('#app', { visible: true });
    assert.match(await text(admin, '#user-name'), /\(admin\)/);
    const row = await waitRow(admin, 'web-premade', 'running');
    assert.equal(await admin.evaluate((e) => e.cells[0].textContent, row), made.body.id.slice(0, 12));
    // kept for this tab only, unless "remember" was ticked
    assert.equal(await admin.evaluate(() => sessionStorage.getItem('sandboxer.token')), TOKEN);
    assert.equal(await admin.evaluate(() => localStorage.getItem('sandboxer.token')), null);
  });

  test('creating a busybox sandbox from the form lists it as running', { timeout: SLOW }, async () => {
    await admin.$eval('#create-image', (e) => { e.value = ''; });
    await admin.type('#create-image', 'busybox');
    await admin.type('#create-label', 'web-made');
    await admin.type('#create-memory', '256M');
    await admin.click('#create-submit');
    await waitRow(admin, 'web-made', 'running', SLOW);
    const list = (await api('GET', '/sandboxes')).body.sandboxes;
    const s = list.find((x) => x.label === 'web-made');
    assert.ok(s && s.status === 'running', JSON.stringify(list));
    assert.equal(s.resources.memory, 256 * 1024 * 1024);
  });

  test('a bad create shows the API error', { timeout: SLOW }, async () => {
    await admin.$eval('#create-label', (e) => { e.value = ''; });
    await admin.type('#create-label', 'web-bad');
    await admin.$eval('#create-memory', (e) => { e.value = ''; });
    await admin.type('#create-memory', 'lots');
    await admin.click('#create-submit');
    await admin.waitForSelector('#error', { visible: true, timeout: SLOW });
    // the API's {detail, code}, as the user sees it
    assert.match(await text(admin, '#error-text'), /memory.*\(\w+\)$/);
    await admin.click('#error-close');
    await admin.waitForSelector('#error', { hidden: true });
    await admin.$eval('#create-memory', (e) => { e.value = ''; });
    assert.ok(!(await rowLabels(admin)).includes('web-bad'));
  });

  test('running a command shows its output and exit code', { timeout: SLOW }, async () => {
    await selectRow(admin, 'web-made');
    await admin.type('#exec-code', 'echo hi');
    await admin.click('#exec-run');
    await admin.waitForFunction(() => !document.querySelector('#exec-result').hidden &&
      document.querySelector('#exec-stdout').textContent === 'hi\n');
    assert.equal(await text(admin, '#exec-exit'), '0');
    assert.equal(await text(admin, '#exec-stderr'), '');
    // stderr and a failing exit code; markup in the output stays text
    await admin.$eval('#exec-code', (e) => { e.value = ''; });
    await admin.type('#exec-code', 'echo "<b>bold</b>"; echo oops >&2; exit 4');
    await admin.click('#exec-run');
    await admin.waitForFunction(() => document.querySelector('#exec-exit').textContent === '4');
    assert.equal(await text(admin, '#exec-stdout'), '<b>bold</b>\n');
    assert.equal(await admin.$eval('#exec-stdout', (e) => e.children.length), 0);
    assert.equal(await text(admin, '#exec-stderr'), 'oops\n');
  });

  test('background processes: start, list, output and kill', { timeout: SLOW }, async () => {
    const id = await selectRow(admin, 'web-made');
    await admin.type('#proc-code', 'echo bg-out; sleep 300');
    await admin.click('#proc-start');
    const procRow = (cmd, status) => admin.waitForFunction((c, st) =>
      [...document.querySelectorAll('#proc-rows tr')].find((tr) =>
        tr.cells[1].textContent.includes(c) && tr.cells[2].textContent === st), {}, cmd, status);
    const row = (await procRow('sleep 300', 'running')).asElement();
    const pid = Number(await admin.evaluate((tr) => tr.dataset.pid, row));
    const listed = (await api('GET', `/sandboxes/${id}/processes`)).body.processes;
    assert.ok(listed.some((p) => p.pid === pid && p.status === 'running'));
    // one started elsewhere shows up on its own (the list follows the sandbox's)
    const other = (await api('POST', `/sandboxes/${id}/processes`, { code: 'exit 6', tag: 'api' })).body;
    await admin.waitForFunction((p) => [...document.querySelectorAll('#proc-rows tr')].some(
      (tr) => tr.dataset.pid === String(p) && tr.cells[3].textContent === '6' &&
        tr.cells[1].textContent.includes('[api]')), {}, other.pid);
    // its output, as text
    await admin.evaluate((tr) => tr.cells[4].querySelector('button.link').click(), row);
    await admin.waitForFunction(() => !document.querySelector('#proc-output').hidden &&
      document.querySelector('#proc-output').textContent.includes('bg-out'));
    // kill
    await admin.evaluate((tr) => tr.cells[4].querySelector('button.danger').click(), row);
    await admin.waitForFunction((p) => [...document.querySelectorAll('#proc-rows tr')].some(
      (tr) => tr.dataset.pid === String(p) && tr.cells[2].textContent === 'exited' &&
        tr.cells[3].textContent === '137 (signal 9)'), {}, pid);
    assert.equal((await api('GET', `/sandboxes/${id}/processes/${pid}`)).body.signal, 9);
  });

  test('files, logs and details of the selected sandbox', { timeout: SLOW }, async () => {
    await admin.$eval('#files-path', (e) => { e.value = ''; });
    await admin.type('#files-path', '/etc');
    await admin.click('#files-list');
    await admin.waitForFunction(() => [...document.querySelectorAll('#file-rows tr')]
      .some((tr) => tr.cells[0].textContent === 'passwd'));
    await admin.click('#logs-load');
    await admin.waitForFunction(() => document.querySelector('#logs').textContent !== '');
    const fields = await text(admin, '#detail-fields');
    assert.match(fields, /busybox/);
  });

  test('the terminal runs a shell and shows how it ended', { timeout: SLOW }, async () => {
    await selectRow(admin, 'web-made');
    await admin.click('#term-open');
    await admin.waitForFunction(() => document.querySelector('#term-status').textContent ===
      'connected');
    await admin.waitForSelector('#terminal .xterm-rows', { visible: true });
    await admin.focus('#terminal textarea');
    await admin.keyboard.type('echo $((6*7))');
    await admin.keyboard.press('Enter');
    // the shell's answer, in xterm's own rows (the typed line holds 6*7, not 42)
    await admin.waitForFunction(() => [...document.querySelectorAll('#terminal .xterm-rows > div')]
      .some((row) => row.textContent.trim() === '42'));
    await admin.keyboard.type('exit 3');
    await admin.keyboard.press('Enter');
    await admin.waitForFunction(() => /exited with code 3\b/.test(
      document.querySelector('#term-status').textContent));
    assert.equal(await admin.$eval('#term-open', (e) => e.disabled), false);
  });

  test('fork makes a child that shows in the list and the tree', { timeout: SLOW }, async () => {
    await selectRow(admin, 'web-made');
    await admin.type('#fork-label', 'web-child');
    await clickWhenEnabled(admin, '#act-fork');
    await waitRow(admin, 'web-child', 'running', SLOW);
    await admin.waitForFunction(() => {
      const t = document.querySelector('#tree').textContent;
      return t.includes('(web-made)') && t.includes('(web-child)');
    });
    const child = (await api('GET', '/sandboxes')).body.sandboxes.find((s) => s.label === 'web-child');
    const parent = (await api('GET', '/sandboxes')).body.sandboxes.find((s) => s.label === 'web-made');
    assert.equal(child.parent_id, parent.id);
    assert.match(await text(admin, '#tree'), new RegExp(child.id.slice(0, 12)));
  });

  test('hibernate then wake changes the status', { timeout: SLOW }, async () => {
    await selectRow(admin, 'web-made');
    await clickWhenEnabled(admin, '#act-hibernate');
    await waitRow(admin, 'web-made', 'hibernated', SLOW);
    await admin.waitForFunction(() => document.querySelector('#detail-status').textContent ===
      'hibernated');
    await clickWhenEnabled(admin, '#act-wake');
    await waitRow(admin, 'web-made', 'running', SLOW);
    await admin.$eval('#exec-code', (e) => { e.value = ''; });
    await admin.type('#exec-code', 'echo awake');
    await admin.click('#exec-run');
    await admin.waitForFunction(() => document.querySelector('#exec-stdout').textContent ===
      'awake\n');
  });

  test('delete asks first, then removes the sandbox', { timeout: SLOW }, async () => {
    const id = await selectRow(admin, 'web-child');
    // "Cancel" keeps it
    admin.once('dialog', (d) => d.dismiss());
    await clickWhenEnabled(admin, '#act-delete');
    await new Promise((r) => setTimeout(r, 2500));
    assert.ok((await rowLabels(admin)).includes('web-child'));
    assert.equal((await api('GET', `/sandboxes/${id}`)).body.status, 'running');
    // "OK" deletes it
    admin.once('dialog', (d) => d.accept());
    await clickWhenEnabled(admin, '#act-delete');
    await admin.waitForFunction(() => ![...document.querySelectorAll('#sandbox-rows tr')]
      .some((tr) => tr.cells[2].textContent === 'web-child'), { timeout: SLOW });
    assert.equal((await api('GET', `/sandboxes/${id}`)).body.status, 'terminated');
  });

  test("the second user does not see the admin's sandboxes", { timeout: SLOW }, async () => {
    const page = await newPage();
    await signIn(page, OTHER);
    await page.waitForSelector('#app', { visible: true });
    await page.waitForSelector('#sandboxes-empty', { visible: true });
    assert.deepEqual(await rowLabels(page), []);
    assert.doesNotMatch(await text(page, '#user-name'), /admin/);
    // and the admin still sees theirs
    assert.ok((await rowLabels(admin)).includes('web-made'));
    await page.close();
  });

  test('"remember" keeps the token across reloads; sign-out forgets it', { timeout: SLOW }, async () => {
    const page = await newPage();
    await signIn(page, OTHER, { remember: true });
    await page.waitForSelector('#app', { visible: true });
    assert.equal(await page.evaluate(() => localStorage.getItem('sandboxer.token')), OTHER);
    await page.reload({ waitUntil: 'load' });
    await page.waitForSelector('#app', { visible: true });
    await page.click('#sign-out');
    await page.waitForSelector('#login', { visible: true });
    assert.equal(await page.evaluate(() => sessionStorage.length + localStorage.length), 0);
    await page.reload({ waitUntil: 'load' });
    await page.waitForSelector('#login', { visible: true });
    assert.equal(await page.$eval('#app', (e) => e.hidden), true);
    await page.close();
  });

  test('no page had a script error or fetched anything but the daemon', () => {
    assert.ok(pages.length >= 4);
    assert.deepEqual(problems, []);
  });
});
