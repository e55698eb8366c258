// Time to interactive through the official E2B JS SDK, driven by bench/bench_templates.py:
// one JSON line in ({"template": T}) → one sample out: Sandbox.create(T) until it resolves
// (create), then the first command (base: commands.run('true'); code-interpreter:
// runCode('1+1')) until its answer (first). The sandbox is killed after, untimed.
// The SDK is tests/e2b's pinned, unmodified copy; its environment (E2B_API_KEY,
// E2B_API_URL, E2B_SANDBOX_URL, E2B_DOMAIN) comes from the bench.
const path = require('node:path')
const readline = require('node:readline')
const { createRequire } = require('node:module')

const req = createRequire(path.join(__dirname, '..', 'tests', 'e2b', 'package.json'))
const { Sandbox } = req('e2b')
const { Sandbox: CodeSandbox } = req('@e2b/code-interpreter')

async function sample (template) {
  const t0 = performance.now()
  const sbx = template === 'code-interpreter'
    ? await CodeSandbox.create(template, { timeoutMs: 300_000 })
    : await Sandbox.create(template, { timeoutMs: 300_000 })
  const t1 = performance.now()
  if (template === 'code-interpreter') {
    const r = await sbx.runCode('1+1')
    if (r.text !== '2') throw new Error(`runCode answered ${JSON.stringify(r)}`)
  } else {
    const r = await sbx.commands.run('true')
    if (r.exitCode !== 0) throw new Error(`true exited ${r.exitCode}`)
  }
  const t2 = performance.now()
  await sbx.kill()
  return { create_ms: t1 - t0, first_ms: t2 - t1, total_ms: t2 - t0 }
}

const rl = readline.createInterface({ input: process.stdin })
rl.on('line', async line => {
  try {
    process.stdout.write(JSON.stringify(await sample(JSON.parse(line).template)) + '\n')
  } catch (e) {
    process.stdout.write(JSON.stringify({ error: String(e && e.stack || e) }) + '\n')
  }
})
