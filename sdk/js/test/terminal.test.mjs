// Terminals over WebSocket: pty (a shell or a command) and attach.
import assert from "node:assert/strict";
import { test } from "node:test";

import { ConflictError, NotFoundError, Terminal } from "../dist/index.js";
import { T, collect, create, otherClient } from "./helpers.mjs";

test("a pty shell resizes and ends with the shell's exit code", T, async (t) => {
  const box = await create(t);
  const term = await box.pty({ cols: 80, rows: 24 });
  t.after(() => term.close());
  assert.ok(term instanceof Terminal);
  const out = collect(term);
  term.write("stty size; tty; echo m1-$((6*7))\n");
  const first = await out.until("m1-42");
  assert.match(first, /24 80/);
  assert.match(first, /\/dev\/pts\//);
  term.resize(132, 43);
  term.write(new TextEncoder().encode("stty size; echo m2-$((6*7))\n")); // bytes work as well as text
  assert.match((await out.until("m2-42")).split("m1-42").at(-1), /43 132/);
  term.write("exit 3\n");
  const exit = await term.exit;
  assert.deepEqual(exit, { exitCode: 3, signal: null, closeCode: 1000, reason: '{"exit_code":3,"signal":null}' });
  assert.equal(term.closed, true);
  assert.equal(term.write("more\n"), false);
  // recorded in the history like any exec
  assert.ok((await box.executions({ newestFirst: true })).some((e) => e.exitCode === 3));
});

test("a pty command, its output as an async iterator, and errors", T, async (t) => {
  const box = await create(t);
  const term = await box.pty({ cmd: "echo from-cmd; exit 5" });
  let text = "";
  for await (const chunk of term) text += Buffer.from(chunk).toString();
  assert.match(text, /from-cmd/);
  assert.equal(await term.wait(), 5);

  // another user's sandbox: 404 as for any route; bad parameters: 400
  await assert.rejects(otherClient().sandbox(box.id).pty(), (err) => err instanceof NotFoundError && err.status === 404);
  await assert.rejects(box.pty({ cols: 0 }), (err) => err.status === 400);
  // a signal ends an open session
  const ac = new AbortController();
  const sh = await box.pty({ signal: ac.signal });
  ac.abort();
  const exit = await sh.exit;
  assert.equal(exit.exitCode, null);
  assert.equal(sh.closed, true);
  // an already aborted signal never connects
  await assert.rejects(box.pty({ signal: AbortSignal.abort() }), (err) => err.name === "AbortError");
  assert.equal((await box.exec("echo fine")).stdout, "fine\n");
});

test("attach reaches an interactive sandbox's main process", T, async (t) => {
  const plain = await create(t);
  await assert.rejects(plain.attach(), ConflictError); // no console

  const box = await create(t, { interactive: true, args: ["/bin/sh"] });
  let term = await box.attach();
  let out = collect(term);
  term.write("echo first-$((10+1))\n");
  await out.until("first-11");
  term.close(); // detach: the main process goes on
  assert.equal((await term.exit).exitCode, null);
  assert.equal((await box.refresh()).status, "running");

  term = await box.attach();
  t.after(() => term.close());
  out = collect(term);
  await out.until("first-11"); // the recent output comes first
  term.write("exit 7\n");
  assert.equal(await term.wait(), 7);
  const info = await box.wait({ timeout: 20_000 });
  assert.equal(info.exitCode, 7);
});
