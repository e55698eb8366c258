// Type-checked, never run: the public API as a TypeScript user writes it (npm test compiles
// this with strict settings against dist/*.d.ts, so a broken declaration fails the tests).
import {
  ConflictError,
  type ExecChunk,
  type ExecResult,
  type FileInfo,
  type OutputChunk,
  type Process,
  NotFoundError,
  type Sandbox,
  Sandboxer,
  SandboxerError,
  type SandboxEvent,
  type Terminal,
  type TerminalExit,
  withSandbox,
} from "../dist/index.js";

export async function usage(): Promise<void> {
  const sbx = new Sandboxer({ baseUrl: "http://127.0.0.1:8000", token: "sbx_..." });
  const box: Sandbox = await sbx.create({ image: "busybox", label: "demo", env: { A: "1" }, memory: "256M", network: "none", idleTimeout: 600 });
  const r: ExecResult = await box.exec("echo hi", { timeout: 10 });
  const code: number = r.exitCode;
  const a: ExecResult = await box.exec(["python3", "-c", "print(1)"], { env: { X: "1" }, cwd: "/tmp", stdin: "in" });
  void code, a;
  for await (const c of box.execStream("make", { signal: AbortSignal.timeout(60_000) })) {
    const chunk: ExecChunk = c;
    if (chunk.type === "exit") console.log(chunk.exitCode, chunk.timedOut);
    else process.stdout.write(chunk.data);
  }
  await box.files.write("/app/main.py", "print(1)\n", { mkdir: true, mode: 0o644 });
  const bytes: Uint8Array = await box.files.read("/app/main.py");
  const entries: FileInfo[] = await box.files.list("/app");
  const up: string[] = await box.files.upload("/app", [{ name: "a.txt", data: new Uint8Array([1]) }]);
  await box.files.download("/app/main.py", "/tmp/main.py");
  void bytes, entries, up;
  const proc: Process = await box.startProcess("python3 -m http.server", { tag: "web", env: { PORT: "8000" } });
  for await (const c of proc.iterOutput({ cursor: 0, timeout: 60_000 })) {
    const chunk: OutputChunk = c;
    if (chunk.stream !== "dropped") process.stdout.write(chunk.data);
  }
  const procExit: number = await proc.wait();
  const cat = await box.startProcess(["cat"], { stdin: true });
  await cat.sendStdin("x", { eof: true });
  await (await box.process(proc.pid)).kill("TERM");
  const listed: Process[] = await box.processes();
  void procExit, listed;
  const child: Sandbox = await box.fork("try-1");
  const tree = await box.tree();
  console.log(tree.text, tree.root.children.length, child.memoryPreserved);
  const kept = await box.coalesce(child);
  console.log(kept.sandbox.id, kept.terminatedSandboxes);
  await child.hibernate();
  await child.wake();
  const snap = await child.snapshot("warm");
  await sbx.create({ snapshot: snap.name });
  const term: Terminal = await child.pty({ cols: 120, rows: 40 });
  const off = term.onData((d: Uint8Array) => process.stdout.write(d));
  term.write("exit 3\n");
  term.resize(100, 30);
  const exit: TerminalExit = await term.exit;
  off();
  console.log(exit.exitCode, await term.wait());
  const events = sbx.events({ lastEventId: 10 });
  for await (const ev of events) {
    const e: SandboxEvent = ev;
    console.log(e.type, e.sandboxId, events.lastEventId);
    break;
  }
  try {
    await sbx.get("nope");
  } catch (err) {
    if (err instanceof NotFoundError) console.log(err.status, err.code, err.detail);
    else if (err instanceof ConflictError || err instanceof SandboxerError) throw err;
  }
  const n: number = await withSandbox({ image: "busybox", client: sbx }, async (s) => (await s.exec("true")).exitCode);
  const m: string = await sbx.withSandbox({ image: "busybox" }, (s) => s.id);
  void n, m;
  await sbx.tokens.create({ user: "alice", name: "laptop" });
  await sbx.images.pull("python:3.12");
  await child.terminate();
}

export async function more(sbx: Sandboxer, box: Sandbox): Promise<void> {
  const text: string = await box.output();
  for await (const chunk of box.followOutput()) process.stdout.write(chunk);
  const { executions } = await box.logs({ limit: 10 });
  const tail: Uint8Array = await box.files.read("/var/log/app.log", { offset: -4096 });
  for await (const ev of box.events({ types: ["exec"] })) console.log(ev.data);
  const running: Sandbox[] = await sbx.list({ status: "running", label: "x" });
  await sbx.delete(running[0]?.id ?? "none");
  await box.exec("make test", { check: true });
  void text, executions, tail;
}
