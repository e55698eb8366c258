// The official E2B JS SDKs (e2b, @e2b/code-interpreter; pinned in package.json, unmodified)
// against a real Sandboxer daemon. Run by tests/integration/test_e2b_sdk.py, which starts the
// daemon with --e2b-domain and passes:
//   E2B_API_URL, E2B_SANDBOX_URL  the daemon itself (the SDK's own options for a self-hosted
//                                 API; envd requests then carry E2b-Sandbox-Id/-Port headers)
//   E2B_DOMAIN                    the daemon's --e2b-domain (getHost builds names below it)
//   E2B_API_KEY                   user A's key (POST /auth/tokens {"kind": "e2b"})
//   E2B_OTHER_API_KEY             user B's key
//   SANDBOXER_ADDR                host:port of the daemon, for requests by Host header
// Every test kills what it made, failed or not.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import http from 'node:http'
import { Sandbox, CommandExitError, FilesystemEventType, NotFoundError } from 'e2b'
import { Sandbox as CodeSandbox } from '@e2b/code-interpreter'

const OTHER = process.env.E2B_OTHER_API_KEY
const ADDR = process.env.SANDBOXER_ADDR
const TAG = `run-${process.pid}`
const made = []

async function create (template = 'base', opts = {}) {
  const Cls = template === 'code-interpreter' ? CodeSandbox : Sandbox
  const sbx = await Cls.create(template, { timeoutMs: 300_000, ...opts,
    metadata: { suite: TAG, ...(opts.metadata || {}) } })
  made.push(sbx.sandboxId)
  return sbx
}

after(async () => {
  for (const id of made) await Sandbox.kill(id).catch(() => {})
})

// Poll fn until it returns something true; fail with what was awaited. No sleeps as waits.
async function waitFor (what, fn, timeoutMs = 30_000) {
  const deadline = Date.now() + timeoutMs
  let last
  while (Date.now() < deadline) {
    last = await fn()
    if (last) return last
    await new Promise(resolve => setTimeout(resolve, 100))
  }
  throw new Error(`timed out waiting for ${what}; last: ${JSON.stringify(last)}`)
}

// GET path from the daemon with the Host header the SDK's getHost() gave (what a DNS name and
// a TLS front would carry there).
function getByHost (host, path = '/') {
  const [hostname, port] = ADDR.split(':')
  return new Promise((resolve, reject) => {
    const req = http.get({ hostname, port, path, headers: { host }, timeout: 10_000 }, res => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', d => { body += d })
      res.on('end', () => resolve({ status: res.statusCode, body }))
    })
    req.on('timeout', () => req.destroy(new Error('timeout')))
    req.on('error', reject)
  })
}

test('create with metadata and envs, getInfo, kill', async () => {
  const sbx = await create('base', { metadata: { role: 'info' }, envs: { GREETING: 'hello' } })
  assert.match(sbx.sandboxId, /^[a-z0-9]{20}$/)
  const info = await sbx.getInfo()
  assert.equal(info.sandboxId, sbx.sandboxId)
  assert.equal(info.templateId, 'base')
  assert.equal(info.state, 'running')
  assert.deepEqual(info.metadata, { suite: TAG, role: 'info' })
  assert.ok(info.endAt > info.startedAt)
  const r = await sbx.commands.run('echo $GREETING; whoami; pwd')
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'hello\nuser\n/home/user\n')
  assert.equal(await sbx.isRunning(), true)
  assert.equal(await sbx.kill(), true)
  assert.equal(await sbx.isRunning(), false)
  await assert.rejects(Sandbox.connect(sbx.sandboxId), NotFoundError)
})

test('commands: foreground, stderr, exit code, env, cwd, user, timeout', async () => {
  const sbx = await create()
  const r = await sbx.commands.run('echo out; echo err >&2; pwd; echo $X', {
    cwd: '/tmp', envs: { X: 'y' } })
  assert.equal(r.stdout, 'out\n/tmp\ny\n')
  assert.equal(r.stderr, 'err\n')
  const err = await sbx.commands.run('exit 3').catch(e => e)
  assert.ok(err instanceof CommandExitError, String(err))
  assert.equal(err.exitCode, 3)
  assert.equal((await sbx.commands.run('whoami', { user: 'root' })).stdout, 'root\n')
  const lines = []
  await sbx.commands.run('for i in 1 2 3; do echo $i; done', { onStdout: d => lines.push(d) })
  assert.equal(lines.join(''), '1\n2\n3\n')
  const t0 = Date.now()
  await assert.rejects(sbx.commands.run('sleep 30', { timeoutMs: 1500 }))
  assert.ok(Date.now() - t0 < 15_000)
})

test('commands: background, list, connect, stdin, kill', async () => {
  const sbx = await create()
  const seen = []
  const h = await sbx.commands.run('echo started; sleep 600', {
    background: true, onStdout: d => seen.push(d) })
  assert.ok(h.pid > 0)
  await waitFor('the background output', () => seen.join('').includes('started'))
  const listed = await sbx.commands.list()
  assert.ok(listed.some(p => p.pid === h.pid && p.args.join(' ').includes('sleep 600')),
    JSON.stringify(listed))

  const again = []
  const c = await sbx.commands.connect(h.pid, { onStdout: d => again.push(d) })
  assert.equal(c.pid, h.pid)
  assert.equal(await sbx.commands.kill(h.pid), true)
  const res = await c.wait().catch(e => e)
  assert.notEqual(res.exitCode, 0)
  await waitFor('the killed process gone from the list',
    async () => !(await sbx.commands.list()).some(p => p.pid === h.pid))

  const cat = await sbx.commands.run('cat', { background: true, stdin: true })
  await sbx.commands.sendStdin(cat.pid, 'through stdin\n')
  await waitFor('cat echoing stdin', () => cat.stdout.includes('through stdin'))
  await sbx.commands.closeStdin(cat.pid)
  const done = await cat.wait()
  assert.equal(done.exitCode, 0)
  assert.equal(done.stdout, 'through stdin\n')
})

test('files: write, read, list, exists, getInfo, makeDir, rename, remove', async () => {
  const sbx = await create()
  await sbx.files.write('/home/user/a.txt', 'hello file')
  assert.equal(await sbx.files.read('/home/user/a.txt'), 'hello file')
  const bytes = new Uint8Array([0, 1, 2, 255, 254])
  await sbx.files.write('/home/user/b.bin', bytes.buffer)
  assert.deepEqual(new Uint8Array(await sbx.files.read('/home/user/b.bin', { format: 'bytes' })),
    bytes)
  await sbx.files.write([{ path: '/home/user/d/x.txt', data: 'x' },
    { path: '/home/user/d/y.txt', data: 'yy' }])
  assert.equal(await sbx.files.makeDir('/home/user/d/sub'), true)
  const names = (await sbx.files.list('/home/user/d')).map(e => e.name).sort()
  assert.deepEqual(names, ['sub', 'x.txt', 'y.txt'])
  const info = await sbx.files.getInfo('/home/user/d/y.txt')
  assert.equal(info.size, 2)
  assert.equal(info.type, 'file')
  assert.equal(await sbx.files.exists('/home/user/d/x.txt'), true)
  await sbx.files.rename('/home/user/d/x.txt', '/home/user/d/sub/z.txt')
  assert.equal(await sbx.files.exists('/home/user/d/x.txt'), false)
  assert.equal(await sbx.files.read('/home/user/d/sub/z.txt'), 'x')
  const deep = (await sbx.files.list('/home/user/d', { depth: 2 })).map(e => e.path).sort()
  assert.ok(deep.includes('/home/user/d/sub/z.txt'), JSON.stringify(deep))
  await sbx.files.remove('/home/user/d')
  assert.equal(await sbx.files.exists('/home/user/d'), false)
  await assert.rejects(sbx.files.read('/home/user/missing.txt'), NotFoundError)
  // files written through the SDK belong to the sandbox's user, as with E2B
  assert.equal((await sbx.commands.run('stat -c %U /home/user/a.txt')).stdout, 'user\n')
})

test('files: watchDir recursive', async () => {
  const sbx = await create()
  await sbx.files.makeDir('/home/user/w/inner')
  const events = []
  const handle = await sbx.files.watchDir('/home/user/w', e => events.push(e), { recursive: true })
  try {
    await sbx.files.write('/home/user/w/top.txt', 'a')
    await sbx.files.write('/home/user/w/inner/deep.txt', 'b')
    await waitFor('events for both files', () =>
      events.some(e => e.name === 'top.txt') && events.some(e => e.name === 'inner/deep.txt'))
    assert.ok(events.some(e => e.type === FilesystemEventType.WRITE ||
                               e.type === FilesystemEventType.CREATE))
  } finally {
    await handle.stop()
  }
})

test('getHost reaches a port served inside the sandbox', async () => {
  const sbx = await create()
  await sbx.files.write('/tmp/www/index.html', 'served from the sandbox')
  await sbx.commands.run('python3 -m http.server 8000 --directory /tmp/www', { background: true })
  const host = sbx.getHost(8000)
  assert.equal(host, `8000-${sbx.sandboxId}.${process.env.E2B_DOMAIN}`)
  const res = await waitFor('the server inside', async () => {
    const r = await getByHost(host).catch(() => null)
    return r && r.status === 200 ? r : null
  })
  assert.equal(res.body, 'served from the sandbox')
  // envd's health through its own host name, as E2B's proxy serves it
  const health = await getByHost(sbx.getHost(49983), '/health')
  assert.equal(health.status, 204)
})

test('setTimeout extends endAt; a sandbox ends at its endAt', async () => {
  const sbx = await create('base', { timeoutMs: 60_000 })
  const before = await sbx.getInfo()
  await sbx.setTimeout(240_000)
  const after = await sbx.getInfo()
  assert.ok(after.endAt.getTime() - before.endAt.getTime() > 150_000,
    `${before.endAt} -> ${after.endAt}`)

  const short = await create('base', { timeoutMs: 3_000 })
  assert.equal(await short.isRunning(), true)
  await waitFor('the short sandbox to end at its endAt', async () =>
    !(await Sandbox.getInfo(short.sandboxId).then(() => true).catch(() => false)), 60_000)
  await assert.rejects(Sandbox.connect(short.sandboxId), NotFoundError)
})

test('pause, then connect resumes with its processes and memory', async () => {
  const sbx = await create()
  const bg = await sbx.commands.run(
    'python3 -c "import time\nn = 0\nwhile True:\n    n += 1\n    open(\'/tmp/n\', \'w\').write(str(n))\n    time.sleep(0.1)"',
    { background: true })
  // pausing may end this stream with an error (E2B's drops connections into a paused
  // sandbox): handled here, so that it is no unhandled rejection
  bg.wait().catch(() => {})
  await waitFor('the counter', async () => (await sbx.files.exists('/tmp/n')))
  assert.equal(await Sandbox.pause(sbx.sandboxId), true)
  const paused = await Sandbox.getInfo(sbx.sandboxId)
  assert.equal(paused.state, 'paused')
  const listedPaused = await Sandbox.list({ query: { metadata: { suite: TAG }, state: ['paused'] } })
    .nextItems()
  assert.ok(listedPaused.some(s => s.sandboxId === sbx.sandboxId))
  // a second pause of a paused sandbox: false (409), as E2B answers
  assert.equal(await Sandbox.pause(sbx.sandboxId), false)

  const back = await Sandbox.connect(sbx.sandboxId)
  assert.equal((await back.getInfo()).state, 'running')
  const procs = await back.commands.list()
  assert.ok(procs.some(p => p.pid === bg.pid), JSON.stringify(procs))
  const n1 = Number(await back.files.read('/tmp/n'))
  await waitFor('the same counter going on', async () =>
    Number(await back.files.read('/tmp/n')) > n1)
})

test('Sandbox.list: metadata filter and pagination', async () => {
  const group = `list-${process.pid}`
  const ids = []
  for (let i = 0; i < 3; i++) ids.push((await create('base', { metadata: { group } })).sandboxId)
  const pager = Sandbox.list({ query: { metadata: { group } }, limit: 2 })
  const seen = []
  let pages = 0
  while (pager.hasNext) {
    const items = await pager.nextItems()
    pages++
    assert.ok(items.length <= 2)
    for (const s of items) {
      assert.equal(s.metadata.group, group)
      seen.push(s.sandboxId)
    }
    assert.ok(pages < 10)
  }
  assert.equal(pages, 2)
  assert.deepEqual(seen.sort(), [...ids].sort())
  const none = await Sandbox.list({ query: { metadata: { group: 'no-such-group' } } }).nextItems()
  assert.deepEqual(none, [])
})

test("another user's key cannot see or touch the sandbox", async () => {
  const sbx = await create()
  const opts = { apiKey: OTHER }
  await assert.rejects(Sandbox.getInfo(sbx.sandboxId, opts), NotFoundError)
  await assert.rejects(Sandbox.connect(sbx.sandboxId, opts), NotFoundError)
  assert.equal(await Sandbox.kill(sbx.sandboxId, opts), false)
  await assert.rejects(Sandbox.setTimeout(sbx.sandboxId, 1000, opts), NotFoundError)
  await assert.rejects(Sandbox.pause(sbx.sandboxId, opts), NotFoundError)
  const theirs = await Sandbox.list({ ...opts, query: { metadata: { suite: TAG } } }).nextItems()
  assert.deepEqual(theirs, [])
  assert.equal(await sbx.isRunning(), true)
  await assert.rejects(Sandbox.list({ apiKey: 'e2b_' + '0'.repeat(64) }).nextItems())
})

test('secure sandbox: signed upload/download URLs, pty, fork with memory', async () => {
  const sbx = await create('base', { secure: true })
  const headers = { 'E2b-Sandbox-Id': sbx.sandboxId } // what E2B_SANDBOX_URL needs besides
  const up = await sbx.uploadUrl('/home/user/up.txt')
  assert.match(up, /signature=v1_/)
  const form = new FormData()
  form.append('file', new Blob(['signed upload']), 'up.txt')
  assert.equal((await fetch(up, { method: 'POST', body: form, headers })).status, 200)
  const down = await fetch(await sbx.downloadUrl('/home/user/up.txt'), { headers })
  assert.equal(down.status, 200)
  assert.equal(await down.text(), 'signed upload')
  const unsigned = await fetch(down.url.replace(/signature=[^&]*/, 'signature=v1_bad'),
    { headers })
  assert.equal(unsigned.status, 401)

  let out = ''
  const pty = await sbx.pty.create({ cols: 80, rows: 24,
    onData: d => { out += new TextDecoder().decode(d) } })
  await sbx.pty.resize(pty.pid, { cols: 100, rows: 30 })
  await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('echo pty-$((6*7)) $COLUMNS\n'))
  await waitFor('the pty echoing', () => out.includes('pty-42 100'))
  await sbx.pty.kill(pty.pid)
  await pty.wait().catch(() => {})

  const counter = await sbx.commands.run('python3 -c "import time\nwhile True: time.sleep(1)"',
    { background: true })
  counter.wait().catch(() => {})
  const [child] = await sbx.fork({ count: 1 })
  assert.ok(child instanceof Sandbox, String(child))
  made.push(child.sandboxId)
  assert.notEqual(child.sandboxId, sbx.sandboxId)
  assert.equal(await child.files.read('/home/user/up.txt'), 'signed upload')
  assert.ok((await child.commands.list()).some(p => p.pid === counter.pid))
  assert.equal(await child.kill(), true)
})

test('code interpreter: runCode keeps state across cells and across pause/connect', async () => {
  const sbx = await create('code-interpreter')
  const first = await sbx.runCode('x = 41\nprint("set")')
  assert.equal(first.error, undefined)
  assert.deepEqual(first.logs.stdout, ['set\n'])
  const second = await sbx.runCode('x + 1')
  assert.equal(second.text, '42')
  const bad = await sbx.runCode('1 / 0')
  assert.equal(bad.error.name, 'ZeroDivisionError')
  assert.match(bad.error.traceback, /ZeroDivisionError/)

  // a matplotlib figure comes back as a PNG result
  const fig = await sbx.runCode(
    'import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()')
  assert.equal(fig.error, undefined)
  const png = fig.results.find(r => r.png)
  assert.ok(png, JSON.stringify(fig.results.map(r => r.formats())))
  assert.equal(Buffer.from(png.png, 'base64').subarray(1, 4).toString(), 'PNG')

  assert.equal(await CodeSandbox.pause(sbx.sandboxId), true)
  const back = await CodeSandbox.connect(sbx.sandboxId)
  const third = await back.runCode('x * 2')
  assert.equal(third.text, '82')
})
