// The files API: write, read, stream, list, stat, upload, download, delete; bytes kept exact.
import assert from "node:assert/strict";
import { randomBytes, createHash } from "node:crypto";
import { mkdtemp, readFile, rm, writeFile, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import { InvalidRequestError, NotFoundError } from "../dist/index.js";
import { T, create } from "./helpers.mjs";

const md5 = (b) => createHash("md5").update(b).digest("hex");

test("write, read, stat, list and delete keep binary bytes exact", T, async (t) => {
  const box = await create(t);
  const every = new Uint8Array(256).map((_, i) => i); // every byte value, NUL and 0xff included
  const data = Buffer.concat([every, randomBytes(300_000), every]);
  const w = await box.files.write("/tmp/a/b/data.bin", data, { mkdir: true, mode: 0o600 });
  assert.deepEqual(w, { path: "/tmp/a/b/data.bin", size: data.length });
  const back = await box.files.read("/tmp/a/b/data.bin");
  assert.ok(back instanceof Uint8Array);
  assert.equal(Buffer.compare(Buffer.from(back), data), 0);
  // the sandbox sees the same bytes
  assert.equal((await box.exec("md5sum /tmp/a/b/data.bin")).stdout.split(" ")[0], md5(data));

  const st = await box.files.stat("/tmp/a/b/data.bin");
  assert.equal(st.size, data.length);
  assert.equal(st.isDir, false);
  assert.equal(st.type, "file");
  assert.ok(st.mode.endsWith("600"), st.mode);
  assert.equal((await box.files.stat("/tmp/a")).isDir, true);

  const list = await box.files.list("/tmp/a/b");
  assert.deepEqual(list.map((e) => [e.name, e.path, e.isDir, e.size]), [["data.bin", "/tmp/a/b/data.bin", false, data.length]]);
  assert.ok((await box.files.list("/")).some((e) => e.name === "tmp" && e.isDir));

  // a range
  const part = await box.files.read("/tmp/a/b/data.bin", { offset: 250, length: 10 });
  assert.deepEqual([...part], [...data.subarray(250, 260)]);
  const tail = await box.files.read("/tmp/a/b/data.bin", { offset: -256 });
  assert.deepEqual([...tail], [...every]);
  const from = await box.files.read("/tmp/a/b/data.bin", { offset: data.length - 3 });
  assert.deepEqual([...from], [253, 254, 255]);
  // text, with a string written
  await box.files.write("/tmp/t.txt", "héllo\nwörld ✓\n");
  assert.equal(await box.files.readText("/tmp/t.txt"), "héllo\nwörld ✓\n");
  assert.equal((await box.exec("cat /tmp/t.txt")).stdout, "héllo\nwörld ✓\n");
  // mode as a string; a write replaces the file whole
  await box.files.write("/tmp/t.txt", "short", { mode: "0755" });
  assert.equal(await box.files.readText("/tmp/t.txt"), "short");
  assert.ok((await box.files.stat("/tmp/t.txt")).mode.endsWith("755"));

  assert.equal(await box.files.exists("/tmp/t.txt"), true);
  assert.equal(await box.files.exists("/tmp/nope"), false);
  await assert.rejects(box.files.read("/tmp/nope"), NotFoundError);
  await assert.rejects(box.files.read("/tmp/a"), InvalidRequestError); // a directory
  await assert.rejects(box.files.write("/tmp/no/such/dir/f", "x"), NotFoundError); // without mkdir

  await assert.rejects(box.files.delete("/tmp/a"), InvalidRequestError); // not empty
  await box.files.delete("/tmp/a", { recursive: true });
  await box.files.delete("/tmp/t.txt");
  assert.equal(await box.files.exists("/tmp/a"), false);
  assert.equal(await box.files.exists("/tmp/t.txt"), false);
});

test("upload several files in one request (multipart)", T, async (t) => {
  const box = await create(t);
  const bin = randomBytes(70_000);
  const uploaded = await box.files.upload("/tmp/up", [
    { name: "one.txt", data: "first file\n" },
    { name: "two.bin", data: bin },
    { name: "empty", data: "" },
    { name: "blob.dat", data: new Blob([new Uint8Array([0, 1, 254, 255])]) },
  ]);
  assert.deepEqual(uploaded, ["/tmp/up/one.txt", "/tmp/up/two.bin", "/tmp/up/empty", "/tmp/up/blob.dat"]);
  assert.equal(await box.files.readText("/tmp/up/one.txt"), "first file\n");
  assert.equal(Buffer.compare(Buffer.from(await box.files.read("/tmp/up/two.bin")), bin), 0);
  assert.equal((await box.files.read("/tmp/up/empty")).length, 0);
  assert.deepEqual([...(await box.files.read("/tmp/up/blob.dat"))], [0, 1, 254, 255]);
  // an object of name → content works too
  assert.deepEqual(await box.files.upload("/tmp/up2", { "a.py": "print(1)\n" }), ["/tmp/up2/a.py"]);
  const names = (await box.files.list("/tmp/up")).map((e) => e.name).sort();
  assert.deepEqual(names, ["blob.dat", "empty", "one.txt", "two.bin"]);
  // a name that would leave the directory is refused
  await assert.rejects(box.files.upload("/tmp/up", [{ name: "../evil", data: "x" }]), InvalidRequestError);
});

test("streams both ways, and files to and from local paths", T, async (t) => {
  const box = await create(t);
  const dir = await mkdtemp(join(tmpdir(), "sandboxer-sdk-"));
  t.after(() => rm(dir, { recursive: true, force: true }));

  // write from an async iterable, read as a stream
  const parts = Array.from({ length: 20 }, () => randomBytes(50_000));
  async function* gen() {
    for (const p of parts) yield p;
  }
  const all = Buffer.concat(parts);
  assert.equal((await box.files.write("/tmp/streamed.bin", gen())).size, all.length);
  let n = 0;
  const h = createHash("md5");
  for await (const c of await box.files.stream("/tmp/streamed.bin")) {
    n += c.length;
    h.update(c);
  }
  assert.equal(n, all.length);
  assert.equal(h.digest("hex"), md5(all));

  // download to a path (and into a directory), upload from a path
  const local = join(dir, "copy.bin");
  assert.deepEqual(await box.files.download("/tmp/streamed.bin", local), { path: local, size: all.length });
  assert.equal(md5(await readFile(local)), md5(all));
  const intoDir = await box.files.download("/tmp/streamed.bin", dir);
  assert.equal(intoDir.path, join(dir, "streamed.bin"));
  await assert.rejects(box.files.download("/tmp/missing", join(dir, "missing")), NotFoundError);
  await assert.rejects(stat(join(dir, "missing")), { code: "ENOENT" });

  const src = join(dir, "script.sh");
  await writeFile(src, "#!/bin/sh\necho from-local-file\n", { mode: 0o755 });
  const up = await box.files.uploadFile(src, "/opt/bin/script.sh", { mkdir: true });
  assert.equal(up.path, "/opt/bin/script.sh");
  assert.ok((await box.files.stat("/opt/bin/script.sh")).mode.endsWith("755"));
  assert.equal((await box.exec(["/opt/bin/script.sh"])).stdout, "from-local-file\n");
});
