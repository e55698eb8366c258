// Sandboxes, the client, tokens, images, and the typed errors.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  ConnectionError,
  InvalidRequestError,
  NotFoundError,
  Sandbox,
  Sandboxer,
  SandboxerError,
  UnauthorizedError,
  withSandbox,
} from "../dist/index.js";
import { IMAGE, T, create, otherClient, sbx, track, until } from "./helpers.mjs";

test("create, get, list, update and delete a sandbox", T, async (t) => {
  const box = await create(t, { label: "first", hostname: "sdk-box", env: { GREETING: "hey" }, memory: "256M" });
  assert.ok(box instanceof Sandbox);
  assert.match(box.id, /^[0-9a-f]{64}$/);
  assert.equal(box.status, "running");
  assert.equal(box.label, "first");
  assert.equal(box.hostname, "sdk-box");
  assert.equal(box.info.resources.memory, 256 * 1024 * 1024);
  assert.equal((await box.exec("echo $GREETING; hostname")).stdout, "hey\nsdk-box\n");

  const byId = await sbx.get(box.id);
  assert.equal(byId.name, box.name);
  const byName = await sbx.get(box.name);
  assert.equal(byName.id, box.id);
  assert.ok((await sbx.list()).some((s) => s.id === box.id && s.status === "running"));

  const renamed = `renamed-${process.pid}-${Date.now()}`;
  await box.update({ label: renamed });
  assert.equal(box.label, renamed);
  assert.equal((await box.refresh()).label, renamed);
  assert.equal(JSON.parse(JSON.stringify(box)).id, box.id);

  assert.deepEqual((await sbx.list({ label: renamed, status: "running" })).map((s) => s.id), [box.id]);
  assert.equal((await sbx.list({ label: renamed, status: ["exited", "terminated"] })).length, 0);

  await box.terminate();
  assert.equal(box.status, "terminated");
  const gone = await sbx.get(box.id); // the row stays
  assert.equal(gone.status, "terminated");
  assert.ok((await sbx.list()).some((s) => s.id === box.id && s.status === "terminated"));
  // a handle by id alone
  assert.equal((await sbx.sandbox(box.id).refresh()).status, "terminated");
  // delete by id or name
  const second = await create(t);
  await sbx.delete(second.name);
  assert.equal((await second.refresh()).status, "terminated");
});

test("the reference SDK's positional create(image, label, interactive) form", T, async (t) => {
  const label = `sdk-js positional ${process.pid}`;
  const box = track(t, await sbx.create(IMAGE, label, false, { env: { WHO: "positional" }, signal: AbortSignal.timeout(120_000) }));
  assert.equal(box.status, "running");
  assert.equal(box.label, label);
  assert.equal(box.info.interactive, false);
  assert.equal((await box.exec("echo $WHO")).stdout, "positional\n");
  const tty = track(t, await sbx.create(IMAGE, `${label} tty`, true, { args: ["sh"], signal: AbortSignal.timeout(120_000) }));
  assert.equal(tty.info.interactive, true);
  assert.equal(tty.label, `${label} tty`);
});

test("a main process that exits: wait() and logs", T, async (t) => {
  const box = await create(t, { args: ["sh", "-c", "echo main-out; echo main-err >&2; exit 4"] });
  const info = await box.wait({ timeout: 20_000 });
  assert.equal(info.status, "exited");
  assert.equal(info.exitCode, 4);
  const output = await box.output();
  assert.match(output, /main-out/);
  assert.match(output, /main-err/);
});

test("withSandbox deletes the sandbox when the function returns or throws", T, async () => {
  let kept;
  const out = await sbx.withSandbox({ image: IMAGE }, async (box) => {
    kept = box;
    return (await box.exec(["echo", "inside"])).stdout;
  });
  assert.equal(out, "inside\n");
  assert.equal((await sbx.get(kept.id)).status, "terminated");

  await assert.rejects(
    withSandbox({ image: IMAGE, client: sbx }, async (box) => {
      kept = box;
      throw new Error("boom");
    }),
    /boom/,
  );
  assert.equal((await sbx.get(kept.id)).status, "terminated");
});

test("me, tokens and images", T, async () => {
  const me = await sbx.me();
  assert.equal(me.admin, true);
  assert.ok(me.token.id);

  const made = await sbx.tokens.create({ name: "sdk-js-test" });
  try {
    assert.match(made.token, /^sbx_[0-9a-f]{64}$/);
    assert.equal(made.user, me.name);
    const mine = new Sandboxer({ token: made.token });
    assert.equal((await mine.me()).token.id, made.id);
    assert.ok((await sbx.tokens.list()).some((tk) => tk.id === made.id && tk.name === "sdk-js-test"));
  } finally {
    await sbx.tokens.delete(made.id);
  }
  assert.ok(!(await sbx.tokens.list()).some((tk) => tk.id === made.id));
  await assert.rejects(new Sandboxer({ token: made.token }).me(), UnauthorizedError);

  const images = await sbx.images.list();
  assert.ok(images.some((i) => i.ref.includes(IMAGE)), JSON.stringify(images));
  const pulled = await sbx.images.pull(IMAGE);
  assert.ok(pulled.ref.includes(IMAGE) && pulled.digest);
  assert.equal((await sbx.health()).status, "ok");
});

test("errors are typed: another user's sandbox is a 404, a bad body a 400", T, async (t) => {
  const box = await create(t);
  const other = otherClient();
  for (const call of [
    () => other.get(box.id),
    () => other.sandbox(box.id).exec("echo no"),
    () => other.sandbox(box.id).files.read("/etc/hostname"),
    () => other.sandbox(box.id).fork(),
    () => other.sandbox(box.id).terminate(),
  ]) {
    await assert.rejects(call(), (err) => {
      assert.ok(err instanceof NotFoundError, String(err));
      assert.ok(err instanceof SandboxerError);
      assert.equal(err.status, 404);
      assert.equal(err.code, "sandbox_not_found");
      assert.ok(err.detail);
      return true;
    });
  }
  assert.ok(!(await other.list()).some((s) => s.id === box.id));
  assert.equal((await box.refresh()).status, "running"); // untouched

  // invalid bodies and values: 400
  await assert.rejects(sbx.create({ image: IMAGE, cpus: "lots" }), (err) => {
    assert.ok(err instanceof InvalidRequestError, String(err));
    assert.equal(err.status, 400);
    assert.ok(err.code && err.detail);
    return true;
  });
  await assert.rejects(sbx.create({ image: IMAGE, network: "everywhere" }), InvalidRequestError);
  await assert.rejects(box.exec(""), InvalidRequestError);
  await assert.rejects(box.exec([]), InvalidRequestError);
  await assert.rejects(sbx.request("POST", "/sandboxes", { body: "{not json", headers: { "content-type": "application/json" } }), InvalidRequestError);
  // a create option this SDK does not know is refused before any request
  await assert.rejects(sbx.create({ image: IMAGE, colour: "blue" }), TypeError);

  // no token, a wrong token: 401
  await assert.rejects(new Sandboxer({ token: "sbx_" + "0".repeat(64) }).list(), (err) => err instanceof UnauthorizedError && err.status === 401);
  // nobody listening: a ConnectionError
  await assert.rejects(new Sandboxer({ baseUrl: "http://127.0.0.1:9" }).list(), (err) => err instanceof ConnectionError && err.status === 0);
  // a missing sandbox
  await assert.rejects(sbx.get("0".repeat(64)), NotFoundError);
});

test("a sandbox handle made by fork or get can be tracked and cleaned like any", T, async (t) => {
  const box = await create(t);
  const again = track(t, await sbx.get(box.id));
  assert.equal(again.id, box.id);
});

test("the proxy reaches the sandbox's HTTP server; public needs no token", T, async (t) => {
  const box = await create(t, {
    args: ["sh", "-c", "mkdir -p /www && echo it-works > /www/index.html && exec httpd -f -p 8080 -h /www"],
    ports: [8080],
  });
  let res;
  await until(async () => (res = await box.proxyFetch("/index.html")).ok, "the server to answer");
  assert.equal(await res.text(), "it-works\n");
  assert.equal((await box.proxyFetch("index.html", { port: 8080 })).status, 200);
  const url = box.proxyUrl("/index.html");
  assert.ok(url.startsWith(sbx.baseUrl + "/sandboxes/"), url);
  assert.equal((await fetch(url)).status, 401); // private: the owner's token only
  await box.update({ public: true });
  assert.equal(box.isPublic, true);
  const open = await fetch(url);
  assert.equal(open.status, 200);
  assert.equal(await open.text(), "it-works\n");
});

test("stats of a sandbox, and the daemon's metrics for admins", T, async (t) => {
  const box = await create(t, { memory: "64M" });
  await box.exec("dd if=/dev/zero of=/tmp/blob bs=1M count=2 2>/dev/null");
  const st = await box.stats();
  assert.equal(st.id, box.id);
  assert.equal(st.memory.limit_bytes, 64 * 1024 * 1024);
  assert.ok(st.cpu.usage_seconds > 0);
  assert.ok(st.disk.used_bytes >= 2 * 1024 * 1024);
  const text = await sbx.metrics();
  assert.match(text, /^sandboxer_sandboxes\{status="running"\} [1-9]/m);
  await assert.rejects(otherClient().metrics(), (e) => e instanceof SandboxerError && e.status === 403);
});
