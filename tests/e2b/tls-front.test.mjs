// The official E2B SDKs through the TLS front docs/e2b.md sets up: Caddy with the site of
// `sandboxer caddy-config --e2b`, certificates from its local CA (NODE_EXTRA_CA_CERTS), and
// nothing but E2B_DOMAIN and E2B_API_KEY for the SDK, which then builds https://api.<domain>
// and https://<port>-<sandbox id>.<domain> itself. loopback.cjs (--require) stands in for the
// machine's resolver and port 443. Run by tests/integration/test_e2b_sdk.py.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'
import { Sandbox as CodeSandbox } from '@e2b/code-interpreter'

const made = []
after(async () => {
  for (const id of made) await Sandbox.kill(id).catch(() => {})
})

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

test('the SDK by its own URLs: commands, files, a port, through Caddy', async () => {
  assert.equal(process.env.E2B_API_URL, undefined)
  assert.equal(process.env.E2B_SANDBOX_URL, undefined)
  const sbx = await Sandbox.create('base', { timeoutMs: 120_000 })
  made.push(sbx.sandboxId)
  const chunks = []
  const r = await sbx.commands.run('echo one; sleep 0.5; echo two',
    { onStdout: d => chunks.push(d) })
  assert.equal(r.stdout, 'one\ntwo\n')
  assert.ok(chunks.length >= 2, 'output streamed through the front, not buffered to the end')
  await sbx.files.write('/tmp/www/index.html', 'over TLS')
  assert.equal(await sbx.files.read('/tmp/www/index.html'), 'over TLS')
  await sbx.commands.run('python3 -m http.server 8000 --directory /tmp/www', { background: true })
  const url = `https://${sbx.getHost(8000)}/`
  assert.equal(url, `https://8000-${sbx.sandboxId}.${process.env.E2B_DOMAIN}/`)
  const body = await waitFor('the server inside, through Caddy', async () => {
    const res = await fetch(url).catch(() => null)
    return res && res.status === 200 ? res.text() : null
  })
  assert.equal(body, 'over TLS')
  assert.equal(await sbx.kill(), true)
})

test('runCode through Caddy', async () => {
  const sbx = await CodeSandbox.create('code-interpreter', { timeoutMs: 120_000 })
  made.push(sbx.sandboxId)
  await sbx.runCode('y = 6 * 7')
  assert.equal((await sbx.runCode('y')).text, '42')
})
