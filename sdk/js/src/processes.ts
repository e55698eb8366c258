/**
 * Background processes: started in a sandbox and owned by it (its agent keeps them and the
 * last 1 MiB of each one's output), so they outlive the call that started them and go
 * through a fork, a hibernation or a daemon restart.
 *
 * ```ts
 * const p = await box.startProcess("python3 server.py", { tag: "web" });
 * for await (const c of p.iterOutput()) process.stdout.write(c.data); // until it exits
 * const code = await p.wait();
 * ```
 *
 * Output is addressed by cursors: absolute byte offsets in everything the process wrote
 * (stdout and stderr together). Each chunk carries the cursor just after it, so a reader
 * that lost its connection (or a daemon that restarted) goes on from there, missing nothing
 * and seeing nothing twice; `iterOutput` does that by itself.
 */
import { ConnectionError, ServerError, StreamError } from "./errors.js";
import { type RequestOptions, type Transport, iterateLines, sleep } from "./http.js";

/** Options of `startProcess`. */
export interface StartProcessOptions extends RequestOptions {
  env?: Record<string, string>;
  cwd?: string;
  /** User name or uid[:gid]. */
  user?: string;
  /** `true`: a stdin to write with `sendStdin`; text: written first, then stdin is closed. */
  stdin?: boolean | string;
  /** Run it on a terminal (all output is stdout). */
  tty?: boolean;
  /** The terminal's size, 1-1000 each (default 80 x 24). */
  cols?: number;
  rows?: number;
  /** A tag to find it by (at most 256 bytes). */
  tag?: string;
}

/** A background process as the daemon describes it. */
export interface ProcessInfo {
  /** In the sandbox; also its process group. */
  pid: number;
  argv: string[];
  argvTruncated: boolean;
  /** The code, or argv joined. */
  command: string;
  tag: string | null;
  tty: boolean;
  /** Its stdin can still be written. */
  stdin: boolean;
  status: "running" | "exited";
  /** Once exited: its status, or 128 + the signal that killed it. */
  exitCode: number | null;
  signal: number | null;
  startedAt: number;
  endedAt: number | null;
  /** The cursor of the oldest byte of output still kept. */
  outputStart: number;
  /** The cursor after the newest byte: all it ever wrote. */
  outputEnd: number;
}

/** A piece of output. `stream` "dropped": older output no longer kept (`bytes` says how much). */
export interface OutputChunk {
  stream: "stdout" | "stderr" | "dropped";
  /** Text (bytes that are not UTF-8 are replaced); empty for "dropped". */
  data: string;
  /** The cursor just after it: where to resume. */
  cursor: number;
  /** "dropped": how many bytes were skipped. */
  bytes?: number;
}

/** One read of a process's output (`readOutput`). */
export interface ProcessOutput {
  pid: number;
  /** Where the chunks start: the asked cursor plus `dropped`. */
  start: number;
  dropped: number;
  /** Pass as `cursor` next time. */
  nextCursor: number;
  /** It exited and nothing more will come. */
  done: boolean;
  chunks: { stream: "stdout" | "stderr"; data: string; cursor: number }[];
  process: ProcessInfo;
  /** The stdout chunks joined. */
  stdout: string;
  /** The stderr chunks joined. */
  stderr: string;
}

/** Options of `iterOutput` and `wait`. */
export interface FollowOptions extends RequestOptions {
  /** Where to start (default 0, the oldest byte kept; `wait` starts at the end known). */
  cursor?: number;
  /** Reconnect from the last cursor when the stream breaks off (default true). */
  reconnect?: boolean;
  /** Milliseconds: reject with a StreamError "timeout" if it has not exited by then. */
  timeout?: number;
}

type Wire = Record<string, unknown>;

const num = (v: unknown, d = 0): number => (typeof v === "number" ? v : d);
const numOrNull = (v: unknown): number | null => (typeof v === "number" ? v : null);

/** @internal */
export function toProcessInfo(w: Wire): ProcessInfo {
  return {
    pid: num(w.pid),
    argv: Array.isArray(w.argv) ? w.argv.map(String) : [],
    argvTruncated: w.argv_truncated === true,
    command: typeof w.command === "string" ? w.command : "",
    tag: typeof w.tag === "string" ? w.tag : null,
    tty: w.tty === true,
    stdin: w.stdin === true,
    status: w.status === "exited" ? "exited" : "running",
    exitCode: numOrNull(w.exit_code),
    signal: numOrNull(w.signal),
    startedAt: num(w.started_at),
    endedAt: numOrNull(w.ended_at),
    outputStart: num(w.output_start),
    outputEnd: num(w.output_end),
  };
}

function toProcessOutput(w: Wire): ProcessOutput {
  const chunks = (Array.isArray(w.chunks) ? w.chunks : []).map((c) => {
    const x = c as Wire;
    return { stream: x.stream === "stderr" ? ("stderr" as const) : ("stdout" as const), data: String(x.data ?? ""), cursor: num(x.cursor) };
  });
  const join = (s: string) => chunks.filter((c) => c.stream === s).map((c) => c.data).join("");
  return {
    pid: num(w.pid),
    start: num(w.start),
    dropped: num(w.dropped),
    nextCursor: num(w.next_cursor),
    done: w.done === true,
    chunks,
    process: toProcessInfo((w.process ?? {}) as Wire),
    stdout: join("stdout"),
    stderr: join("stderr"),
  };
}

/** The body of POST /processes. @internal */
export function startBody(command: string | string[], opts: StartProcessOptions): Wire {
  if (typeof command !== "string" && !Array.isArray(command)) {
    throw new TypeError("command must be a string (shell code) or an array (argv)");
  }
  const body: Wire = typeof command === "string" ? { code: command } : { argv: command };
  for (const k of ["env", "cwd", "user", "stdin", "cols", "rows", "tag"] as const) {
    if (opts[k] !== undefined) body[k] = opts[k];
  }
  if (opts.tty) body.tty = true;
  return body;
}

const RETRIES = 60; // reconnections in a row without progress
const READ_PAUSE_MAX = 2000;

/** A background process of a sandbox (`box.startProcess`, `box.processes`, `box.process`). */
export class Process {
  /** The last known record. */
  info: ProcessInfo;

  /** @internal */
  constructor(
    private readonly http: Transport,
    readonly sandboxId: string,
    info: ProcessInfo,
  ) {
    this.info = info;
  }

  get pid(): number {
    return this.info.pid;
  }
  get status(): "running" | "exited" {
    return this.info.status;
  }
  get exitCode(): number | null {
    return this.info.exitCode;
  }
  get signal(): number | null {
    return this.info.signal;
  }
  get tag(): string | null {
    return this.info.tag;
  }
  get command(): string {
    return this.info.command;
  }

  toJSON(): ProcessInfo {
    return this.info;
  }

  private path(suffix = ""): string {
    return `/sandboxes/${encodeURIComponent(this.sandboxId)}/processes/${this.info.pid}${suffix}`;
  }

  private async record(method: string, suffix: string, req: { json?: unknown; body?: Uint8Array; query?: Record<string, string | undefined>; headers?: Record<string, string>; signal?: AbortSignal | undefined }): Promise<this> {
    this.info = toProcessInfo(await this.http.json<Wire>(method, this.path(suffix), req));
    return this;
  }

  /** Asks for its record again (wakes a hibernated sandbox). */
  async refresh(opts: RequestOptions = {}): Promise<ProcessInfo> {
    await this.record("GET", "", { signal: opts.signal });
    return this.info;
  }

  /** What is kept of its output from `cursor` on (at most `limit` bytes, default 256 KiB), without waiting. */
  async readOutput(opts: { cursor?: number; limit?: number } & RequestOptions = {}): Promise<ProcessOutput> {
    const w = await this.http.json<Wire>("GET", this.path("/output"), { query: { cursor: opts.cursor ?? 0, limit: opts.limit }, signal: opts.signal });
    const out = toProcessOutput(w);
    this.info = out.process;
    return out;
  }

  /** All of the output still kept, every page read. */
  async output(opts: RequestOptions = {}): Promise<ProcessOutput> {
    const first = await this.readOutput({ cursor: 0, limit: 1 << 20, signal: opts.signal });
    let all = first;
    for (let cursor = first.nextCursor; ; ) {
      const page = await this.readOutput({ cursor, limit: 1 << 20, signal: opts.signal });
      if (page.nextCursor === cursor) break;
      all = { ...all, chunks: [...all.chunks, ...page.chunks], stdout: all.stdout + page.stdout, stderr: all.stderr + page.stderr, nextCursor: page.nextCursor, done: page.done, process: page.process };
      cursor = page.nextCursor;
    }
    return all;
  }

  /**
   * Its output from `cursor` on as it comes, until it exits (then `status`, `exitCode` and
   * `signal` are set). When the stream breaks off (the network, a daemon restart) it
   * reconnects from the last chunk's cursor; while the sandbox is hibernated it waits without
   * waking it (and without counting as activity).
   */
  async *iterOutput(opts: FollowOptions = {}): AsyncGenerator<OutputChunk, void, undefined> {
    const { reconnect = true } = opts;
    const timer = opts.timeout !== undefined ? AbortSignal.timeout(opts.timeout) : undefined;
    const signal = timer ? anyOf(opts.signal, timer) : opts.signal;
    let cursor = opts.cursor ?? 0;
    let fails = 0;
    let pause = 200;
    const label = `GET ${this.path("/output")}`;
    for (;;) {
      try {
        const res = await this.http.send("GET", this.path("/output"), { query: { cursor, stream: "true" }, signal });
        for await (const line of iterateLines(res, signal, label)) {
          if (!line.trim()) continue;
          const m = JSON.parse(line) as Wire;
          fails = 0;
          pause = 200;
          if (typeof m.cursor === "number") cursor = m.cursor;
          if (m.type === "stdout" || m.type === "stderr") yield { stream: m.type, data: String(m.output ?? ""), cursor };
          else if (m.type === "dropped") yield { stream: "dropped", data: "", cursor, bytes: num(m.bytes) };
          else if (m.type === "exit") {
            this.info = { ...this.info, status: "exited", exitCode: numOrNull(m.exit_code), signal: numOrNull(m.signal), outputEnd: cursor };
            return;
          } else if (m.type === "error") {
            throw new StreamError({ status: 0, code: typeof m.code === "string" ? m.code : "follow_failed", detail: String(m.output ?? "the output cannot be followed"), request: label, body: m });
          }
        }
        throw new StreamError({ status: 0, code: "stream_ended", detail: "the output stream ended before the exit", request: label });
      } catch (err) {
        if (timer?.aborted && !opts.signal?.aborted) {
          throw new StreamError({ status: 0, code: "timeout", detail: `the process did not exit within ${opts.timeout} ms`, request: label });
        }
        if (signal?.aborted) throw signal.reason ?? err;
        const transient = err instanceof ConnectionError || err instanceof ServerError || (err instanceof StreamError && err.code === "stream_ended");
        if (!transient || !reconnect || ++fails > RETRIES) throw err;
      }
      await sleep(pause, signal).catch((e: unknown) => {
        if (timer?.aborted && !opts.signal?.aborted) {
          throw new StreamError({ status: 0, code: "timeout", detail: `the process did not exit within ${opts.timeout} ms`, request: label });
        }
        throw e;
      });
      pause = Math.min(pause * 2, READ_PAUSE_MAX);
    }
  }

  /**
   * Waits until it exits and answers its exit code (128 + the signal when one killed it). It
   * follows the output from the end known (resuming after a broken connection); a hibernated
   * sandbox is waited for, not woken.
   */
  async wait(opts: Omit<FollowOptions, "cursor"> = {}): Promise<number> {
    if (this.info.status !== "exited") {
      for await (const chunk of this.iterOutput({ ...opts, cursor: this.info.outputEnd })) void chunk;
    }
    return this.info.exitCode ?? -1;
  }

  /** Writes to its stdin (at most 256 KiB a call); `eof` then closes it (a PTY process: ^D). */
  async sendStdin(data: string | Uint8Array, opts: { eof?: boolean } & RequestOptions = {}): Promise<this> {
    const body = typeof data === "string" ? new TextEncoder().encode(data) : data;
    return this.record("POST", "/stdin", { body, query: { eof: opts.eof ? "true" : undefined }, headers: { "content-type": "application/octet-stream" }, signal: opts.signal });
  }

  /** Closes its stdin (a PTY process: types ^D). */
  closeStdin(opts: RequestOptions = {}): Promise<this> {
    return this.sendStdin(new Uint8Array(0), { ...opts, eof: true });
  }

  /** Sends its process group a signal: a number or a name ("TERM", "SIGINT"...). */
  sendSignal(sig: number | string, opts: RequestOptions = {}): Promise<this> {
    return this.record("POST", "/signal", { json: { signal: sig }, signal: opts.signal });
  }

  /** SIGTERM to its group. */
  terminate(opts: RequestOptions = {}): Promise<this> {
    return this.sendSignal("TERM", opts);
  }

  /** Kills it (SIGKILL to its group unless `sig` says otherwise); its record stays. */
  kill(sig: number | string = "KILL", opts: RequestOptions = {}): Promise<this> {
    return this.sendSignal(sig, opts);
  }

  /** The size of its terminal (a PTY process). */
  resize(cols: number, rows: number, opts: RequestOptions = {}): Promise<this> {
    return this.record("PATCH", "", { json: { cols, rows }, signal: opts.signal });
  }

  /** Kills its group if it runs and forgets it (record and output). */
  async delete(opts: RequestOptions = {}): Promise<void> {
    await this.http.json("DELETE", this.path(), { signal: opts.signal });
  }
}

function anyOf(a: AbortSignal | undefined, b: AbortSignal): AbortSignal {
  if (!a) return b;
  const any = (AbortSignal as unknown as { any?: (s: AbortSignal[]) => AbortSignal }).any;
  if (any) return any([a, b]);
  const c = new AbortController();
  for (const s of [a, b]) s.addEventListener("abort", () => c.abort(s.reason), { once: true });
  return c.signal;
}

/** The processes calls of a sandbox. @internal */
export async function startProcess(http: Transport, sandboxId: string, command: string | string[], opts: StartProcessOptions): Promise<Process> {
  const w = await http.json<Wire>("POST", `/sandboxes/${encodeURIComponent(sandboxId)}/processes`, { json: startBody(command, opts), signal: opts.signal });
  return new Process(http, sandboxId, toProcessInfo(w));
}

/** @internal */
export async function listProcesses(http: Transport, sandboxId: string, opts: RequestOptions): Promise<Process[]> {
  const w = await http.json<{ processes?: Wire[] }>("GET", `/sandboxes/${encodeURIComponent(sandboxId)}/processes`, { signal: opts.signal });
  return (w?.processes ?? []).map((p) => new Process(http, sandboxId, toProcessInfo(p)));
}

/** @internal */
export async function getProcess(http: Transport, sandboxId: string, pid: number, opts: RequestOptions): Promise<Process> {
  const w = await http.json<Wire>("GET", `/sandboxes/${encodeURIComponent(sandboxId)}/processes/${pid}`, { signal: opts.signal });
  return new Process(http, sandboxId, toProcessInfo(w));
}
