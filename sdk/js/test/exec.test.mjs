// exec (shell code and argv), streamed exec, AbortSignal, logs and the execution history.
import assert from "node:assert/strict";
import { test } from "node:test";

import { CommandFailedError, ConflictError, isAbortError } from "../dist/index.js";
import { T, create, until } from "./helpers.mjs";

test("exec runs shell code and argv", T, async (t) => {
  const box = await create(t);
  const r = await box.exec("echo out; echo err >&2; exit 3");
  assert.deepEqual(
    { stdout: r.stdout, stderr: r.stderr, exitCode: r.exitCode, timedOut: r.timedOut, truncated: r.truncated },
    { stdout: "out\n", stderr: "err\n", exitCode: 3, timedOut: false, truncated: false },
  );
  assert.equal(typeof r.executionId, "number");

  // argv: no shell between, so nothing is expanded
  const a = await box.exec(["echo", "$HOME", "a b"]);
  assert.equal(a.stdout, "$HOME a b\n");
  assert.equal(a.exitCode, 0);
  // stdin, env, cwd
  assert.equal((await box.exec(["cat"], { stdin: "from stdin\n" })).stdout, "from stdin\n");
  assert.equal((await box.exec(["sh", "-c", "echo $X; pwd"], { env: { X: "42" }, cwd: "/tmp" })).stdout, "42\n/tmp\n");
  // shell code with argv-only options goes through /exec as sh -c
  assert.equal((await box.exec("echo $Y-$(pwd)", { env: { Y: "y" }, cwd: "/etc" })).stdout, "y-/etc\n");
  // the daemon's timeout kills it
  const slow = await box.exec("echo started; sleep 10", { timeout: 0.5 });
  assert.equal(slow.timedOut, true);
  assert.equal(slow.stdout, "started\n");
  // unicode both ways
  assert.equal((await box.exec(["printf", "%s", "héllo ✓ 🙂"])).stdout, "héllo ✓ 🙂");
});

test("execStream yields stdout and stderr chunks in order, then exit", T, async (t) => {
  const box = await create(t);
  const chunks = [];
  const times = [];
  for await (const c of box.execStream("for i in 1 2 3 4 5; do echo out-$i; echo err-$i >&2; sleep 0.15; done; exit 7")) {
    chunks.push(c);
    times.push(Date.now());
  }
  const last = chunks.at(-1);
  assert.equal(last.type, "exit");
  assert.equal(last.exitCode, 7);
  assert.equal(last.timedOut, false);
  assert.ok(chunks.slice(0, -1).every((c) => c.type === "stdout" || c.type === "stderr"));
  const out = chunks.filter((c) => c.type === "stdout").map((c) => c.data).join("");
  const err = chunks.filter((c) => c.type === "stderr").map((c) => c.data).join("");
  assert.equal(out, "out-1\nout-2\nout-3\nout-4\nout-5\n");
  assert.equal(err, "err-1\nerr-2\nerr-3\nerr-4\nerr-5\n");
  // streamed as it ran, not all at the end
  assert.ok(chunks.filter((c) => c.type === "stdout").length >= 3, JSON.stringify(chunks));
  assert.ok(times.at(-1) - times[0] >= 400, "the chunks came over the run's time");
  // interleaved as they were written: round i's lines (both streams) before round i+1's
  const seq = chunks.filter((c) => c.type !== "exit").flatMap((c) => c.data.trim().split("\n"));
  for (let i = 1; i < 5; i++) {
    assert.ok(seq.indexOf(`err-${i}`) < seq.indexOf(`out-${i + 1}`), seq.join(","));
    assert.ok(seq.indexOf(`out-${i}`) < seq.indexOf(`err-${i + 1}`), seq.join(","));
  }

  // argv streams too
  const argv = [];
  for await (const c of box.execStream(["sh", "-c", "echo a; echo b"])) argv.push(c);
  assert.equal(argv.filter((c) => c.type === "stdout").map((c) => c.data).join(""), "a\nb\n");
  assert.equal(argv.at(-1).exitCode, 0);
});

test("an AbortSignal cancels a long exec stream", T, async (t) => {
  const box = await create(t);
  const ac = new AbortController();
  const seen = [];
  const t0 = Date.now();
  await assert.rejects(
    (async () => {
      for await (const c of box.execStream("i=0; while true; do echo tick-$i; i=$((i+1)); sleep 0.2; done", { signal: ac.signal })) {
        seen.push(c);
        if (seen.length === 2) ac.abort();
      }
    })(),
    (err) => err.name === "AbortError" && isAbortError(err),
  );
  assert.equal(seen.length, 2);
  assert.ok(Date.now() - t0 < 10_000);
  // the daemon stops the command once the client is gone
  await until(async () => !(await box.exec("ps")).stdout.includes("tick-"), "the loop to end", 15_000, 200);

  // a plain exec with a timeout signal
  await assert.rejects(box.exec("sleep 3", { signal: AbortSignal.timeout(300) }), (err) => err.name === "TimeoutError");
  // an already aborted signal sends nothing
  await assert.rejects(box.exec("echo no", { signal: AbortSignal.abort() }), (err) => err.name === "AbortError");
  // breaking out of the loop ends the request too
  for await (const c of box.execStream("echo first; i=0; while true; do echo more-$i; i=$((i+1)); sleep 0.2; done")) {
    assert.ok(c.data.startsWith("first\n"), c.data);
    break;
  }
  await until(async () => !(await box.exec("ps")).stdout.includes("more-"), "the second loop to end", 15_000, 200);
  assert.equal((await box.exec("echo still fine")).stdout, "still fine\n");
});

test("exec on a paused sandbox is a ConflictError", T, async (t) => {
  const box = await create(t);
  assert.equal(await box.pause(), "paused");
  assert.equal((await box.refresh()).status, "paused");
  await assert.rejects(box.exec("echo hi"), (err) => err instanceof ConflictError && err.status === 409);
  await assert.rejects(
    (async () => {
      for await (const _ of box.execStream("echo hi")) break;
    })(),
    ConflictError,
  );
  assert.equal(await box.unpause(), "running");
  assert.equal((await box.exec("echo back")).stdout, "back\n");
});

test("output and followOutput read the main process's output", T, async (t) => {
  const box = await create(t, { args: ["sh", "-c", "for i in 1 2 3; do echo line-$i; sleep 0.2; done"] });
  let text = "";
  for await (const chunk of box.followOutput({ signal: AbortSignal.timeout(20_000) })) text += chunk;
  assert.equal(text, "line-1\nline-2\nline-3\n"); // followed until the process ended
  assert.equal(await box.output(), text);
});

test("the execution history keeps commands, output and exit codes", T, async (t) => {
  const box = await create(t);
  await box.exec("echo first");
  await box.exec(["sh", "-c", "echo second >&2; exit 2"]);
  const oldest = await box.executions();
  assert.deepEqual(oldest.map((e) => e.command), ["echo first", "sh -c echo second >&2; exit 2"]);
  assert.deepEqual(oldest.map((e) => e.exitCode), [0, 2]);
  assert.deepEqual(oldest[0].logs.map((l) => [l.fd, l.content]), [["stdout", "first\n"]]);
  assert.deepEqual(oldest[1].logs.map((l) => [l.fd, l.content]), [["stderr", "second\n"]]);
  const newest = await box.executions({ newestFirst: true, limit: 1 });
  assert.equal(newest.length, 1);
  assert.equal(newest[0].id, oldest[1].id);
  const page = await box.executionLogs(oldest[0].id);
  assert.equal(page.execution.command, "echo first");
  assert.equal(page.logs.map((l) => l.content).join(""), "first\n");
  const rest = await box.executionLogs(oldest[0].id, { startId: page.nextStartId ?? page.logs.at(-1).id });
  assert.equal(rest.logs.length, 0);
  // logs({limit}): the established SDK's shape, the last `limit` executions oldest first
  const logs = await box.logs({ limit: 1 });
  assert.deepEqual(logs.executions.map((e) => e.id), [oldest[1].id]);
});

test("exec with check rejects on a non-zero exit", T, async (t) => {
  const box = await create(t);
  assert.equal((await box.exec("true", { check: true })).exitCode, 0);
  await assert.rejects(box.exec("echo why >&2; exit 9", { check: true }), (err) => {
    assert.ok(err instanceof CommandFailedError);
    assert.equal(err.code, "command_failed");
    assert.equal(err.result.exitCode, 9);
    assert.equal(err.result.stderr, "why\n");
    return true;
  });
});
