/**
 * Terminals over WebSocket (`/exec/pty` and `/attach`), with the `ws` package: binary frames
 * carry the terminal's bytes both ways, a text frame `{"resize":{"cols","rows"}}` resizes, and
 * the daemon closes with 1000 and the reason `{"exit_code":N,"signal":S|null}` when the
 * process ends (1001 on idle timeout or daemon stop, 1011 when the sandbox goes away).
 */
import WebSocket from "ws";

import { ConnectionError, errorFromResponse } from "./errors.js";

/** How a terminal session ended. */
export interface TerminalExit {
  /** The process's exit code; null when the session ended otherwise (detach, drop, idle). */
  exitCode: number | null;
  /** The signal that killed the process, if one did. */
  signal: number | string | null;
  /** The WebSocket close code: 1000 normal, 1001 idle timeout or daemon stop, 1011 sandbox gone, 1006 dropped. */
  closeCode: number;
  /** The close frame's reason text. */
  reason: string;
}

export type DataListener = (data: Uint8Array) => void;

/** The most output kept for a terminal nobody listens to yet (oldest dropped first). */
const PENDING_MAX = 4 << 20;

/**
 * An open terminal session. Output goes to `onData` listeners (and async iterators over the
 * terminal); output that comes before the first listener is kept for it.
 */
export class Terminal implements AsyncIterable<Uint8Array> {
  /** Resolves once the session has ended (never rejects). */
  readonly exit: Promise<TerminalExit>;
  private readonly ws: WebSocket;
  private readonly listeners = new Set<DataListener>();
  private pending: Uint8Array[] = [];
  private pendingBytes = 0;
  private ended: TerminalExit | undefined;

  /** @internal */
  constructor(ws: WebSocket) {
    this.ws = ws;
    this.exit = new Promise<TerminalExit>((resolve) => {
      ws.on("message", (data: WebSocket.RawData, isBinary: boolean) => {
        if (!isBinary) return; // the daemon sends output as binary frames only
        this.emit(toBytes(data));
      });
      ws.on("close", (code: number, reasonBuf: Buffer) => {
        const reason = reasonBuf.toString("utf8");
        let exitCode: number | null = null;
        let sig: number | string | null = null;
        if (reason) {
          try {
            const r = JSON.parse(reason) as { exit_code?: unknown; signal?: unknown };
            if (typeof r.exit_code === "number") exitCode = r.exit_code;
            if (typeof r.signal === "number" || typeof r.signal === "string") sig = r.signal;
          } catch {
            /* a reason that is not ours */
          }
        }
        this.ended = { exitCode, signal: sig, closeCode: code, reason };
        this.unbind?.();
        resolve(this.ended);
      });
      ws.on("error", () => {
        /* 'close' follows and settles exit */
      });
    });
  }

  private unbind: (() => void) | undefined;

  /** Closes the session when signal aborts. @internal */
  bindSignal(signal: AbortSignal | undefined): void {
    if (!signal || this.ended) return;
    const onAbort = () => this.close();
    signal.addEventListener("abort", onAbort, { once: true });
    this.unbind = () => signal.removeEventListener("abort", onAbort);
  }

  /** Whether the session has ended. */
  get closed(): boolean {
    return this.ended !== undefined || this.ws.readyState === WebSocket.CLOSED;
  }

  /** Calls listener with each piece of output; answers a function that removes it. */
  onData(listener: DataListener): () => void {
    this.listeners.add(listener);
    if (this.pending.length) {
      const backlog = this.pending;
      this.pending = [];
      this.pendingBytes = 0;
      for (const d of backlog) listener(d);
    }
    return () => {
      this.listeners.delete(listener);
    };
  }

  /** Sends input (keys, text, bytes). Answers false when the session has already ended. */
  write(data: string | Uint8Array): boolean {
    if (this.ws.readyState !== WebSocket.OPEN) return false;
    const bytes = typeof data === "string" ? Buffer.from(data, "utf8") : data;
    this.ws.send(bytes, { binary: true });
    return true;
  }

  /** Changes the terminal's size (columns and rows, 1-1000). */
  resize(cols: number, rows: number): boolean {
    if (this.ws.readyState !== WebSocket.OPEN) return false;
    this.ws.send(JSON.stringify({ resize: { cols, rows } }), { binary: false });
    return true;
  }

  /**
   * Closes the WebSocket. For `pty` this ends the command; for `attach` it detaches and leaves
   * the main process running. `exit` resolves once closed.
   */
  close(): void {
    if (this.ws.readyState === WebSocket.OPEN || this.ws.readyState === WebSocket.CONNECTING) {
      try {
        this.ws.close(1000);
      } catch {
        this.ws.terminate();
      }
      // A peer that never answers the close frame is dropped.
      const t = setTimeout(() => this.ws.terminate(), 5000);
      t.unref();
    }
  }

  /** The exit code (null when the session ended without one). */
  async wait(): Promise<number | null> {
    return (await this.exit).exitCode;
  }

  /** The output as byte chunks, until the session ends. */
  async *[Symbol.asyncIterator](): AsyncIterator<Uint8Array> {
    const queue: Uint8Array[] = [];
    let wake: (() => void) | undefined;
    const off = this.onData((d) => {
      queue.push(d);
      wake?.();
    });
    let done = false;
    void this.exit.then(() => {
      done = true;
      wake?.();
    });
    try {
      for (;;) {
        if (queue.length) {
          yield queue.shift() as Uint8Array;
          continue;
        }
        if (done) return;
        await new Promise<void>((r) => (wake = r));
        wake = undefined;
      }
    } finally {
      off();
    }
  }

  private emit(data: Uint8Array): void {
    if (this.listeners.size === 0) {
      this.pending.push(data);
      this.pendingBytes += data.byteLength;
      while (this.pendingBytes > PENDING_MAX && this.pending.length > 1) {
        this.pendingBytes -= (this.pending.shift() as Uint8Array).byteLength;
      }
      return;
    }
    for (const l of [...this.listeners]) l(data);
  }
}

function toBytes(data: WebSocket.RawData): Uint8Array {
  if (Array.isArray(data)) return Buffer.concat(data);
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  return data;
}

/** Opens a terminal WebSocket; rejects with a SandboxerError when the daemon refuses it. @internal */
export function openTerminal(url: string, headers: Record<string, string>, signal?: AbortSignal): Promise<Terminal> {
  return new Promise<Terminal>((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const label = `GET ${new URL(url).pathname}`;
    const ws = new WebSocket(url, { headers, perMessageDeflate: false, handshakeTimeout: 30_000 });
    let settled = false;
    const fail = (err: unknown) => {
      if (settled) return;
      settled = true;
      signal?.removeEventListener("abort", onAbort);
      reject(err);
    };
    const onAbort = () => {
      fail(signal?.reason);
      ws.terminate();
    };
    signal?.addEventListener("abort", onAbort, { once: true });
    ws.on("unexpected-response", (req, res) => {
      // The connection is ws's own (no agent): it must be closed here, or it stays open.
      const sock = req.socket ?? res.socket;
      const done = () => {
        req.destroy();
        sock?.destroy();
      };
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => {
        const text = Buffer.concat(chunks).toString("utf8");
        let body: unknown = text;
        try {
          body = JSON.parse(text);
        } catch {
          /* not JSON */
        }
        fail(errorFromResponse(res.statusCode ?? 0, body, label, res.statusMessage ?? ""));
        done();
      });
      res.on("error", (err) => {
        fail(new ConnectionError({ status: 0, code: "connection_failed", detail: err.message, request: label, cause: err }));
        done();
      });
    });
    ws.on("error", (err: Error) => {
      fail(new ConnectionError({ status: 0, code: "connection_failed", detail: err.message, request: label, cause: err }));
    });
    ws.on("close", () => {
      fail(new ConnectionError({ status: 0, code: "connection_failed", detail: "closed before the session opened", request: label }));
    });
    // Listeners go on before 'open' returns control, so no frame can be missed.
    const term = new Terminal(ws);
    ws.on("open", () => {
      if (settled) return;
      settled = true;
      signal?.removeEventListener("abort", onAbort);
      term.bindSignal(signal);
      resolve(term);
    });
  });
}
