// Shared by the tests: clients from the environment, sandboxes deleted after each test (also
// when it fails), and small polling helpers. The tests run against a real daemon:
//   SANDBOXER_URL, SANDBOXER_TOKEN (admin), SANDBOXER_OTHER_TOKEN (another user),
//   SANDBOXER_IMAGE (default busybox).
import { after } from "node:test";

import { NotFoundError, Sandboxer } from "../dist/index.js";

export const IMAGE = process.env.SANDBOXER_IMAGE || "busybox";
export const T = { timeout: 90_000 }; // every test is bounded

if (!process.env.SANDBOXER_URL || !process.env.SANDBOXER_TOKEN) {
  throw new Error("set SANDBOXER_URL and SANDBOXER_TOKEN (a running daemon and its admin token)");
}

export const sbx = new Sandboxer();

export function otherClient() {
  const token = process.env.SANDBOXER_OTHER_TOKEN;
  if (!token) throw new Error("set SANDBOXER_OTHER_TOKEN (a second user's token)");
  return new Sandboxer({ token });
}

const everything = new Set();

async function remove(box) {
  try {
    await box.terminate({ signal: AbortSignal.timeout(60_000) });
  } catch (err) {
    if (!(err instanceof NotFoundError)) console.error(`cleanup of ${box.id}: ${err}`);
  }
}

/** Registers sandboxes for deletion when test t ends; answers the first. */
export function track(t, ...boxes) {
  for (const box of boxes) {
    everything.add(box);
    t.after(async () => {
      if (everything.delete(box)) await remove(box);
    });
  }
  return boxes[0];
}

/** Creates a sandbox that is deleted when test t ends. */
export async function create(t, opts = {}) {
  const base = opts.snapshot ? {} : { image: IMAGE };
  const box = await sbx.create({ ...base, label: `sdk-js ${t.name}`.slice(0, 100), signal: AbortSignal.timeout(120_000), ...opts });
  return track(t, box);
}

// Whatever a test could not delete (a timeout cancelled its hooks) goes at the end of the file.
after(async () => {
  const left = [...everything];
  everything.clear();
  await Promise.all(left.map(remove));
});

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Polls fn until it answers something truthy; fails after ms. */
export async function until(fn, what, ms = 20_000, every = 100) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(every);
  }
}

/** Collects a terminal's output as text; until(marker) waits for marker to show up. */
export function collect(term) {
  const c = {
    text: "",
    async until(marker, ms = 20_000) {
      await until(() => c.text.includes(marker) || term.closed, `${JSON.stringify(marker)} in ${JSON.stringify(c.text.slice(-300))}`, ms, 20);
      if (!c.text.includes(marker)) throw new Error(`terminal closed without ${JSON.stringify(marker)}: ${JSON.stringify(c.text.slice(-300))}`);
      return c.text;
    },
  };
  const dec = new TextDecoder();
  term.onData((d) => {
    c.text += dec.decode(d, { stream: true });
  });
  return c;
}
