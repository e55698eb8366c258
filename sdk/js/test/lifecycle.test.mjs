// Fork, tree, coalesce; hibernate and wake; snapshots.
import assert from "node:assert/strict";
import { test } from "node:test";

import { ConflictError, NotFoundError } from "../dist/index.js";
import { T, create, sbx, sleep, track, until } from "./helpers.mjs";

test("fork, tree and coalesce", T, async (t) => {
  const parent = await create(t, { label: "parent" });
  await parent.files.write("/tmp/shared", "before\n");
  const child = track(t, await parent.fork("child"));
  assert.equal(child.parentId, parent.id);
  assert.equal(child.label, "child");
  assert.equal(typeof child.memoryPreserved, "boolean");
  const grandchild = track(t, await child.fork({ label: "grandchild", hostname: "gc-host" }));
  assert.equal((await grandchild.exec("hostname")).stdout, "gc-host\n");

  // the files are copied, then diverge
  assert.equal(await child.files.readText("/tmp/shared"), "before\n");
  await child.files.write("/tmp/only-child", "c");
  await parent.files.write("/tmp/shared", "changed in parent\n");
  assert.equal(await child.files.readText("/tmp/shared"), "before\n");
  assert.equal(await parent.files.exists("/tmp/only-child"), false);
  assert.deepEqual((await parent.refresh()).childIds, [child.id]);

  const tree = await grandchild.tree();
  assert.equal(tree.root.id, parent.id);
  assert.equal(tree.root.label, "parent");
  assert.deepEqual(tree.root.children.map((c) => c.id), [child.id]);
  assert.deepEqual(tree.root.children[0].children.map((c) => c.id), [grandchild.id]);
  assert.ok(tree.text.includes(child.id.slice(0, 12)), tree.text);

  // keep the child, delete the rest of the parent's subtree
  const other = await parent.fork("other");
  track(t, other);
  const res = await parent.coalesce(child);
  assert.equal(res.sandbox, child);
  assert.equal(child.parentId, null);
  assert.ok(res.message);
  assert.deepEqual([...res.terminatedSandboxes].sort(), [parent.id, grandchild.id, other.id].sort());
  assert.equal(parent.status, "terminated");
  for (const gone of [parent, grandchild, other]) {
    const info = await gone.refresh();
    assert.equal(info.status, "terminated");
    assert.equal(info.deleteReason, "coalesced");
  }
  assert.equal((await child.exec("cat /tmp/only-child")).stdout, "c");
  assert.equal((await child.tree()).root.id, child.id);
});

test("hibernate frees the sandbox and wake resumes its processes where they were", T, async (t) => {
  // the main process counts, ten times a second, into /tmp/count
  const box = await create(t, { args: ["sh", "-c", "i=0; while true; do i=$((i+1)); echo $i > /tmp/count; sleep 0.1; done"] });
  const count = async () => Number((await box.files.readText("/tmp/count")).trim() || "0");
  await until(async () => (await box.files.exists("/tmp/count")) && (await count()) >= 5, "the counter to start");
  await box.files.write("/tmp/kept", "state survives");

  const before = await count();
  const t0 = Date.now();
  assert.equal(await box.hibernate(), "hibernated");
  assert.equal((await box.refresh()).status, "hibernated");
  await sleep(3000); // 30 counts if it were running
  assert.equal(await box.wake(), "running");
  const after = await count();
  const elapsedTicks = (Date.now() - t0) / 100;
  assert.ok(after >= before, `the counter went on (${before} → ${after}), not from zero`);
  assert.ok(after - before <= elapsedTicks - 20, `the counter stood still while hibernated (${before} → ${after} in ${elapsedTicks} ticks)`);
  assert.equal(await box.files.readText("/tmp/kept"), "state survives");
  await until(async () => (await count()) > after, "the counter to go on after wake");

  // an exec wakes a hibernated sandbox too
  await box.hibernate();
  assert.equal((await box.exec("cat /tmp/kept")).stdout, "state survives");
  assert.equal((await box.refresh()).status, "running");
  // pause/unpause: frozen, then going on
  const atPause = await count();
  const p0 = Date.now();
  assert.equal(await box.pause(), "paused");
  await sleep(1500);
  await assert.rejects(box.exec("true"), ConflictError);
  await assert.rejects(box.files.read("/tmp/count"), ConflictError);
  assert.equal(await box.unpause(), "running");
  const atUnpause = await count();
  assert.ok(atUnpause - atPause <= (Date.now() - p0) / 100 - 10, `nothing ran while paused (${atPause} → ${atUnpause})`);
  await until(async () => (await count()) > atUnpause, "the counter to go on after unpause");
});

test("snapshots start new sandboxes with the source's state", T, async (t) => {
  const src = await create(t);
  await src.files.write("/tmp/marker", "from-snapshot\n");
  const name = `sdkjs-${process.pid}-${Date.now()}`;
  const snap = await src.snapshot(name);
  try {
    assert.equal(snap.name, name);
    assert.equal(snap.sourceId, src.id);
    assert.equal(typeof snap.memoryPreserved, "boolean");
    assert.ok((await sbx.snapshots.list()).some((s) => s.name === name));
    await assert.rejects(src.snapshot(name), ConflictError);
    const warm = await create(t, { snapshot: name, label: "warm" });
    assert.equal(await warm.files.readText("/tmp/marker"), "from-snapshot\n");
  } finally {
    await sbx.snapshots.delete(name);
  }
  await assert.rejects(sbx.create({ snapshot: name }), NotFoundError);
  assert.ok(!(await sbx.snapshots.list()).some((s) => s.name === name));
});
