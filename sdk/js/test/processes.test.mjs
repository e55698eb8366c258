// Background processes: start, list, output (read, followed, resumed by cursor), stdin,
// signals, a terminal, errors, a fork keeping them.
import assert from "node:assert/strict";
import { test } from "node:test";

import { ConflictError, NotFoundError, Process, Sandboxer, StreamError } from "../dist/index.js";
import { T, create, track, until } from "./helpers.mjs";

test("startProcess, the list, output and the exit", T, async (t) => {
  const box = await create(t);
  const p = await box.startProcess("echo hi; sleep 0.3; echo bye >&2; exit 3", { tag: "job" });
  assert.ok(p instanceof Process);
  assert.equal(p.status, "running");
  assert.equal(p.tag, "job");
  assert.ok(p.pid > 1);
  const chunks = [];
  for await (const c of p.iterOutput()) chunks.push(c);
  assert.deepEqual(chunks.map((c) => [c.stream, c.data]), [["stdout", "hi\n"], ["stderr", "bye\n"]]);
  assert.equal(chunks.at(-1).cursor, 7);
  assert.equal(p.status, "exited");
  assert.equal(p.exitCode, 3);
  assert.equal(await p.wait(), 3);
  const out = await p.output();
  assert.equal(out.stdout, "hi\n");
  assert.equal(out.stderr, "bye\n");
  assert.equal(out.done, true);
  assert.equal((await p.readOutput({ cursor: 3 })).chunks[0].data, "bye\n");

  const sleeper = await box.startProcess(["sleep", "100"]);
  assert.deepEqual((await box.processes()).map((x) => x.pid), [p.pid, sleeper.pid]);
  assert.equal((await box.process(sleeper.pid)).command, "sleep 100");
  await assert.rejects(box.process(999999), NotFoundError);
  await assert.rejects(sleeper.wait({ timeout: 500 }), (e) => e instanceof StreamError && e.code === "timeout");
  await sleeper.kill();
  assert.equal(await sleeper.wait({ timeout: 30_000 }), 137);
  assert.equal(sleeper.signal, 9);
  await assert.rejects(sleeper.terminate(), ConflictError);
  await sleeper.delete();
  await assert.rejects(sleeper.refresh(), NotFoundError);
  assert.equal((await box.startProcess(["no-such-program"])).exitCode, 127);
});

test("stdin, a terminal, and a fork keeping processes", T, async (t) => {
  const box = await create(t);
  const cat = await box.startProcess(["cat"], { stdin: true });
  await cat.sendStdin("hello\n");
  await cat.sendStdin(new TextEncoder().encode("bytes\n"), { eof: true });
  assert.equal(await cat.wait({ timeout: 30_000 }), 0);
  assert.equal((await cat.output()).stdout, "hello\nbytes\n");
  const wc = await box.startProcess("wc -l", { stdin: "a\nb\n" });
  assert.equal(await wc.wait({ timeout: 30_000 }), 0);
  assert.equal((await wc.output()).stdout.trim(), "2");

  const sh = await box.startProcess("sh", { tty: true, cols: 100, rows: 30 });
  await sh.sendStdin("stty size; echo $((6*7))\r");
  await until(async () => (await sh.output()).stdout.includes("42"), "the shell's answer");
  assert.ok((await sh.output()).stdout.includes("30 100"));
  await sh.resize(120, 40);

  const counter = await box.startProcess("i=0; while true; do i=$((i+1)); echo $i; sleep 0.05; done");
  await until(async () => (await counter.output()).stdout.includes("\n5\n"), "a few lines");
  const child = track(t, await box.fork("with-processes"));
  const copy = await child.process(counter.pid);
  assert.equal(copy.status, "running");
  assert.ok((await copy.output()).stdout.startsWith("1\n2\n3\n"));
  await copy.kill("TERM");
  assert.equal(await copy.wait({ timeout: 30_000 }), 143);
  assert.equal((await counter.refresh()).status, "running");
  await sh.sendStdin("exit 5\r");
  assert.equal(await sh.wait({ timeout: 30_000 }), 5);
});

test("iterOutput resumes from its cursor when the stream breaks off", T, async (t) => {
  // A fetch that cuts each output stream short after its first line: the SDK must reconnect
  // from that line's cursor, and the text must come whole, once. The daemon may send a line a
  // chunk (a loaded machine) or several: the cut comes after the first line either way.
  let cuts = 0;
  const cutting = async (url, init) => {
    const res = await fetch(url, init);
    if (!String(url).includes("stream=true") || !res.body) return res;
    const reader = res.body.getReader();
    const body = new ReadableStream({
      async pull(c) {
        const { done, value } = await reader.read();
        if (done) return c.close();
        const text = new TextDecoder().decode(value);
        const nl = text.indexOf("\n");
        if (cuts < 5 && nl >= 0) {
          cuts++;
          c.enqueue(value.slice(0, nl + 1));
          await reader.cancel();
          return c.close();
        }
        c.enqueue(value);
      },
    });
    return new Response(body, { status: res.status, headers: res.headers });
  };
  const client = new Sandboxer({ fetch: cutting });
  const box = track(t, await client.create({ image: process.env.SANDBOXER_IMAGE || "busybox" }));
  const p = await box.startProcess("for i in 1 2 3 4 5 6 7 8 9 10; do echo line-$i; done; sleep 0.2; exit 2");
  await until(async () => (await p.refresh()).status === "exited", "the exit");
  let text = "";
  for await (const c of p.iterOutput()) text += c.data;
  assert.equal(text, Array.from({ length: 10 }, (_, i) => `line-${i + 1}\n`).join(""));
  assert.ok(cuts >= 1, "the stream was cut");
  assert.equal(p.exitCode, 2);
});
