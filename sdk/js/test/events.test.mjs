// Events as an async iterator over SSE, resumed with Last-Event-ID.
import assert from "node:assert/strict";
import { test } from "node:test";

import { Sandboxer, UnauthorizedError } from "../dist/index.js";
import { T, create, otherClient, sbx } from "./helpers.mjs";

/** The next n events about the sandbox ids in `ids` (the stream's own signal bounds the wait). */
async function take(stream, ids, n) {
  const out = [];
  for await (const ev of stream) {
    if (ids.includes(ev.sandboxId)) out.push(ev);
    if (out.length >= n) break;
  }
  return out;
}

test("events arrive in order, and resume after the last one seen", T, async (t) => {
  const other = otherClient();
  const theirs = await other.create({ image: process.env.SANDBOXER_IMAGE || "busybox" });
  t.after(() => theirs.terminate().catch(() => {}));
  const box = await create(t);
  await box.exec("echo hi");
  const child = await box.fork("evchild");
  await child.terminate();

  const ac = new AbortController();
  const timer = setTimeout(() => ac.abort(), 20_000);
  t.after(() => clearTimeout(timer));
  const stream = sbx.events({ signal: ac.signal });
  const seen = await take(stream, [box.id, child.id, theirs.id], 5);
  assert.deepEqual(
    seen.map((e) => [e.type, e.sandboxId]),
    [
      ["created", box.id],
      ["exec", box.id],
      ["forked", box.id],
      ["created", child.id],
      ["deleted", child.id],
    ],
  );
  for (const e of seen) {
    assert.equal(typeof e.id, "number");
    assert.equal(typeof e.timestamp, "number");
    assert.equal(typeof e.data, "object");
  }
  assert.equal(seen[2].data.child_id, child.id);
  for (let i = 1; i < seen.length; i++) assert.ok(seen[i].id > seen[i - 1].id);
  assert.equal(stream.lastEventId, seen.at(-1).id);
  assert.throws(() => stream[Symbol.asyncIterator](), TypeError); // one iteration per stream

  // what happened after, from a new stream that starts after the last event seen
  await box.pause();
  await box.unpause();
  const resumed = sbx.events({ lastEventId: stream.lastEventId, signal: ac.signal });
  const missed = await take(resumed, [box.id], 2);
  assert.deepEqual(missed.map((e) => e.type), ["paused", "unpaused"]);
  assert.ok(missed[0].id > seen.at(-1).id);

  // live: a listener already waiting gets a new event as it happens
  const live = sbx.events({ lastEventId: resumed.lastEventId, signal: ac.signal });
  const next = take(live, [box.id], 1);
  await new Promise((r) => setTimeout(r, 300));
  await box.update({ label: "relabelled" });
  const [ev] = await next;
  assert.equal(ev.type, "updated");
  assert.equal(ev.sandboxId, box.id);

  // filters: one sandbox's events, some types, from a time on
  const execs = await take(box.events({ types: ["exec", "paused"], signal: ac.signal }), [box.id], 2);
  assert.deepEqual(execs.map((e) => e.type), ["exec", "paused"]);
  const recent = await take(sbx.events({ sandbox: box, since: ev.timestamp, signal: ac.signal }), [box.id], 1);
  assert.deepEqual(recent.map((e) => e.id), [ev.id]);

  // the other user sees only their own
  const theirsSeen = await take(other.events({ signal: ac.signal }), [box.id, theirs.id], 1);
  assert.deepEqual(theirsSeen.map((e) => [e.type, e.sandboxId]), [["created", theirs.id]]);
});

test("events: a bad token and a bad cursor are errors, not retries", T, async () => {
  const bad = new Sandboxer({ token: "sbx_" + "1".repeat(64) });
  await assert.rejects(
    (async () => {
      for await (const _ of bad.events({ signal: AbortSignal.timeout(10_000) })) break;
    })(),
    UnauthorizedError,
  );
  assert.throws(() => sbx.events({ lastEventId: "nope" }), TypeError);
});
