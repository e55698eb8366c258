/** A sandbox handle: exec, files, fork, lifecycle, history, terminals. */
import { createReadStream, createWriteStream } from "node:fs";
import { rename, stat as fsStat, unlink } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";

import { CommandFailedError, InvalidRequestError, NotFoundError, StreamError, SandboxerError } from "./errors.js";
import {
  type Body,
  type RequestOptions,
  type Transport,
  encodeFilePath,
  iterateBody,
  iterateLines,
  iterateText,
  sleep,
  wrapError,
} from "./http.js";
import { type Terminal, openTerminal } from "./terminal.js";
import { type Process, type StartProcessOptions, getProcess, listProcesses, startProcess } from "./processes.js";
import { EventStream, type EventsOptions } from "./events.js";
import {
  type ExecChunk,
  type ExecOptions,
  type ExecResult,
  type Execution,
  type ExecutionLogPage,
  type FileInfo,
  type SandboxInfo,
  type SandboxStatus,
  type SandboxTree,
  type Snapshot,
  toExecResult,
  toExecution,
  toExecutionLog,
  toFileInfo,
  toSandboxInfo,
  toSnapshot,
  toTreeNode,
} from "./types.js";

/** Options of `fork`. */
export interface ForkOptions extends RequestOptions {
  label?: string;
  hostname?: string;
}

/** What `coalesce` answers. */
export interface CoalesceResult {
  /** The kept sandbox, now a root. */
  sandbox: Sandbox;
  message: string;
  /** Ids of the sandboxes deleted. */
  terminatedSandboxes: string[];
}

/** Options of `executions`. */
export interface ExecutionsOptions extends RequestOptions {
  /** How many (the last ones): 1-10000; default 1000 oldest-first, 100 newest-first. */
  limit?: number;
  /** Newest first (`/command-executions`) instead of oldest first (`/execution-logs`). */
  newestFirst?: boolean;
}

export interface ExecutionLogsOptions extends RequestOptions {
  /** Only rows after this id (a previous page's `nextStartId`). */
  startId?: number;
  limit?: number;
}

/** Options of `pty`. */
export interface PtyOptions extends RequestOptions {
  /** A shell command line run with /bin/sh -c; default an interactive shell (bash if there, else sh). */
  cmd?: string;
  /** Initial columns, 1-1000 (default 80). */
  cols?: number;
  /** Initial rows, 1-1000 (default 24). */
  rows?: number;
  /** TERM (default xterm-256color). */
  term?: string;
  cwd?: string;
  /** User name or uid[:gid]. */
  user?: string;
}

/** Options of `wait`. */
export interface WaitOptions extends RequestOptions {
  /** The states to wait for; default exited and terminated. */
  until?: SandboxStatus[];
  /** Milliseconds between looks (default 250). */
  interval?: number;
  /** Give up after this many milliseconds (rejects with a TimeoutError). */
  timeout?: number;
}

/** Bytes for a file: text (UTF-8), bytes, a Blob. */
export type FileData = string | Uint8Array | ArrayBuffer | Blob;

/** A file's content for `write`: FileData, or a stream of bytes (sent as it is read). */
export type FileContent = FileData | ReadableStream<Uint8Array> | AsyncIterable<Uint8Array | string>;

/** Options of the files calls. */
export interface FileOptions extends RequestOptions {
  /** Act as this user of the sandbox (default the image's user). */
  user?: string;
}

export interface WriteOptions extends FileOptions {
  /** Permission bits: a number (0o600) or an octal string ("0600"). */
  mode?: number | string;
  /** Create the missing parent directories. */
  mkdir?: boolean;
}

export interface ReadOptions extends FileOptions {
  /** Start at this byte; a negative offset reads the last -offset bytes. */
  offset?: number;
  /** Read at most this many bytes (from offset). */
  length?: number;
}

export interface DeleteOptions extends FileOptions {
  /** Delete a directory with everything in it. */
  recursive?: boolean;
}

/** One file for `upload`. */
export interface UploadFile {
  /** Its name in the directory (no '/'). */
  name: string;
  data: FileData;
}

/** What `write` answers. */
export interface WriteResult {
  path: string;
  size: number;
}

/** A sandbox's files API (everything happens inside the sandbox, through its agent). */
export class SandboxFiles {
  /** @internal */
  constructor(private readonly sandbox: Sandbox, private readonly http: Transport) {}

  private route(path: string): string {
    return `/sandboxes/${encodeURIComponent(this.sandbox.id)}/files/${encodeFilePath(path)}`;
  }

  /** A file's bytes. */
  async read(path: string, opts: ReadOptions = {}): Promise<Uint8Array> {
    const res = await this.open(path, opts);
    const parts: Uint8Array[] = [];
    let n = 0;
    for await (const c of iterateBody(res, opts.signal, `GET ${path}`)) {
      parts.push(c);
      n += c.byteLength;
    }
    const out = new Uint8Array(n);
    let o = 0;
    for (const p of parts) {
      out.set(p, o);
      o += p.byteLength;
    }
    return out;
  }

  /** A file's content as text (UTF-8). */
  async readText(path: string, opts: ReadOptions = {}): Promise<string> {
    return new TextDecoder("utf-8").decode(await this.read(path, opts));
  }

  /** A file as a stream of byte chunks, read as it is consumed (for large files). */
  async stream(path: string, opts: ReadOptions = {}): Promise<AsyncIterable<Uint8Array>> {
    const res = await this.open(path, opts);
    return iterateBody(res, opts.signal, `GET ${path}`);
  }

  private async open(path: string, opts: ReadOptions): Promise<Response> {
    const headers: Record<string, string> = {};
    if (opts.offset !== undefined || opts.length !== undefined) {
      const start = opts.offset ?? 0;
      if (opts.length !== undefined && opts.length < 1) throw new RangeError("length must be at least 1");
      if (start < 0) {
        if (opts.length !== undefined) throw new RangeError("a negative offset (from the end) takes no length");
        headers.range = `bytes=${start}`; // the last -start bytes
      } else {
        headers.range = opts.length !== undefined ? `bytes=${start}-${start + opts.length - 1}` : `bytes=${start}-`;
      }
    }
    const res = await this.http.send("GET", this.route(path), { query: { user: opts.user }, headers, signal: opts.signal });
    // A directory answers with its listing (JSON) instead of bytes; a file always has Accept-Ranges.
    if (!res.headers.has("accept-ranges") && (res.headers.get("content-type") ?? "").startsWith("application/json")) {
      await res.body?.cancel().catch(() => {});
      throw new InvalidRequestError({ status: 400, code: "is_directory", detail: `${path} is a directory`, request: `GET ${path}` });
    }
    return res;
  }

  /**
   * Writes one file (atomically: readers see the old or the new content). Content may be a
   * stream, sent as it is read. Answers the absolute path and size written.
   */
  async write(path: string, content: FileContent, opts: WriteOptions = {}): Promise<WriteResult> {
    const mode = typeof opts.mode === "number" ? "0" + opts.mode.toString(8) : opts.mode;
    const body = toBody(content);
    const w = await this.http.json<{ path: string; size: number }>("PUT", this.route(path), {
      query: { mode, mkdir: opts.mkdir ? "true" : undefined, user: opts.user },
      body,
      headers: { "content-type": "application/octet-stream" },
      signal: opts.signal,
    });
    return { path: w.path, size: w.size };
  }

  /**
   * Uploads several files into a directory in one multipart request (field `files`).
   * Answers the paths written.
   */
  async upload(dir: string, files: UploadFile[] | Record<string, FileData>, opts: FileOptions = {}): Promise<string[]> {
    const list: UploadFile[] = Array.isArray(files) ? files : Object.entries(files).map(([name, data]) => ({ name, data }));
    const form = new FormData();
    for (const f of list) {
      const blob = f.data instanceof Blob ? f.data : new Blob([typeof f.data === "string" ? f.data : new Uint8Array(f.data as ArrayBuffer)]);
      form.append("files", blob, f.name);
    }
    // Encoded whole first: the daemon's multipart parser is happiest with the body in one piece.
    const encoded = new Response(form);
    const body = new Uint8Array(await encoded.arrayBuffer());
    const r = await this.http.json<{ uploaded: string[] }>("POST", this.route(dir), {
      query: { user: opts.user },
      body,
      headers: { "content-type": encoded.headers.get("content-type") ?? "multipart/form-data" },
      signal: opts.signal,
    });
    // The same path twice in a row is one file the daemon reported twice (its multipart
    // parser can announce a short part again when the part's end arrives in a later read).
    return (r.uploaded ?? []).filter((p, i, all) => i === 0 || all[i - 1] !== p);
  }

  /** Uploads a local file to remotePath (streamed from disk). */
  async uploadFile(localPath: string, remotePath: string, opts: WriteOptions = {}): Promise<WriteResult> {
    const st = await fsStat(localPath);
    if (!st.isFile()) throw new TypeError(`${localPath} is not a regular file`);
    const mode = opts.mode ?? st.mode & 0o777;
    return this.write(remotePath, createReadStream(localPath), { ...opts, mode });
  }

  /**
   * Downloads a file to a local path (streamed; written to a temporary file beside it, then
   * renamed). A localPath that is a directory gets the file's own name. Answers the local path
   * and the bytes written.
   */
  async download(remotePath: string, localPath: string, opts: ReadOptions = {}): Promise<WriteResult> {
    let target = localPath;
    try {
      if ((await fsStat(localPath)).isDirectory()) target = join(localPath, basename(remotePath));
    } catch {
      /* a new file */
    }
    const res = await this.open(remotePath, opts);
    const tmp = join(dirname(target), `.${basename(target)}.sandboxer-${process.pid}-${Date.now()}`);
    let size = 0;
    const counted = (async function* (src: AsyncIterable<Uint8Array>) {
      for await (const c of src) {
        size += c.byteLength;
        yield c;
      }
    })(iterateBody(res, opts.signal, `GET ${remotePath}`));
    try {
      await pipeline(Readable.from(counted), createWriteStream(tmp));
      await rename(tmp, target);
    } catch (err) {
      await unlink(tmp).catch(() => {});
      throw err;
    }
    return { path: target, size };
  }

  /** A directory's entries. */
  async list(path = "/", opts: FileOptions = {}): Promise<FileInfo[]> {
    const r = await this.http.json<{ entries?: unknown[]; [k: string]: unknown }>("GET", this.route(path), {
      query: { user: opts.user },
      signal: opts.signal,
    });
    if (!r || !Array.isArray(r.entries)) {
      throw new InvalidRequestError({ status: 400, code: "not_a_directory", detail: `${path} is not a directory`, request: `GET ${path}` });
    }
    return r.entries.map((e) => toFileInfo(e as Record<string, unknown>));
  }

  /** A file's or directory's info. */
  async stat(path: string, opts: FileOptions = {}): Promise<FileInfo> {
    const r = await this.http.json<Record<string, unknown>>("GET", this.route(path), {
      query: { stat: "true", user: opts.user },
      signal: opts.signal,
    });
    return toFileInfo(r);
  }

  /** Whether the path exists. */
  async exists(path: string, opts: FileOptions = {}): Promise<boolean> {
    try {
      await this.stat(path, opts);
      return true;
    } catch (err) {
      if (err instanceof NotFoundError && err.code !== "sandbox_not_found") return false;
      throw err;
    }
  }

  /** Deletes a file or an empty directory (any directory with `recursive`). */
  async delete(path: string, opts: DeleteOptions = {}): Promise<void> {
    await this.http.json("DELETE", this.route(path), {
      query: { recursive: opts.recursive ? "true" : undefined, user: opts.user },
      signal: opts.signal,
    });
  }
}

function toBody(content: FileContent): Body {
  if (typeof content === "string" || content instanceof Uint8Array || content instanceof ArrayBuffer || content instanceof Blob) {
    return content;
  }
  if (content instanceof ReadableStream) return content;
  if (content && typeof (content as AsyncIterable<unknown>)[Symbol.asyncIterator] === "function") {
    const it = (content as AsyncIterable<Uint8Array | string>)[Symbol.asyncIterator]();
    const enc = new TextEncoder();
    return new ReadableStream<Uint8Array>({
      async pull(controller) {
        const r = await it.next();
        if (r.done) controller.close();
        else controller.enqueue(typeof r.value === "string" ? enc.encode(r.value) : r.value);
      },
      async cancel() {
        await it.return?.();
      },
    });
  }
  throw new TypeError("file content must be a string, bytes, a Blob or a stream of bytes");
}

/**
 * A sandbox. Made by `Sandboxer.create`, `get`, `list`, `fork`; its fields are those of the
 * last answer about it (`refresh()` asks again).
 */
export class Sandbox {
  /** The last known description. */
  info: SandboxInfo;
  /** The files inside it. */
  readonly files: SandboxFiles;
  /** @internal */
  readonly http: Transport;

  /** @internal */
  constructor(http: Transport, info: SandboxInfo) {
    this.http = http;
    this.info = info;
    this.files = new SandboxFiles(this, http);
  }

  get id(): string {
    return this.info.id;
  }
  get name(): string {
    return this.info.name;
  }
  get label(): string {
    return this.info.label;
  }
  get image(): string {
    return this.info.image;
  }
  /** As of the last answer; `refresh()` to ask again. */
  get status(): SandboxStatus {
    return this.info.status;
  }
  get exitCode(): number | null {
    return this.info.exitCode;
  }
  get hostname(): string {
    return this.info.hostname;
  }
  get ipAddress(): string | null {
    return this.info.ipAddress;
  }
  get parentId(): string | null {
    return this.info.parentId;
  }
  get childIds(): string[] {
    return this.info.childIds;
  }
  get createdAt(): number {
    return this.info.createdAt;
  }
  get interactive(): boolean {
    return this.info.interactive;
  }
  get isPublic(): boolean {
    return this.info.isPublic;
  }
  get netRaw(): boolean {
    return this.info.netRaw;
  }
  /** Whether setuid programs (sudo) may gain privileges in it. */
  get setuid(): boolean {
    return this.info.setuid;
  }
  /** The template it was started from, or null. */
  get template(): string | null {
    return this.info.template;
  }
  get url(): string | null {
    return this.info.url;
  }
  /** Only on a fork: whether the child got the parent's processes and memory. */
  get memoryPreserved(): boolean | undefined {
    return this.info.memoryPreserved;
  }

  private path(suffix = ""): string {
    return `/sandboxes/${encodeURIComponent(this.info.id)}${suffix}`;
  }

  toJSON(): SandboxInfo {
    return this.info;
  }

  /** Asks the daemon for this sandbox's current description. */
  async refresh(opts: RequestOptions = {}): Promise<SandboxInfo> {
    const w = await this.http.json<Record<string, unknown>>("GET", this.path(), { signal: opts.signal });
    const keep = this.info.memoryPreserved;
    this.info = toSandboxInfo(w);
    if (keep !== undefined) this.info.memoryPreserved = keep;
    return this.info;
  }

  /** Changes its label or whether the proxy serves it without a token. */
  async update(changes: { label?: string; public?: boolean } & RequestOptions): Promise<this> {
    const body: Record<string, unknown> = {};
    if (changes.label !== undefined) body.label = changes.label;
    if (changes.public !== undefined) body.public = changes.public;
    const r = await this.http.json<{ label?: string; public?: boolean }>("PATCH", this.path(), { json: body, signal: changes.signal });
    if (typeof r?.label === "string") this.info.label = r.label;
    if (typeof r?.public === "boolean") this.info.isPublic = r.public;
    return this;
  }

  // ---- exec ----

  private execRequest(command: string | string[], opts: ExecOptions): { path: string; body: Record<string, unknown> } {
    const needsArgv = opts.env !== undefined || opts.cwd !== undefined || opts.user !== undefined || opts.stdin !== undefined;
    if (typeof command === "string" && !needsArgv) {
      const body: Record<string, unknown> = { code: command };
      if (opts.timeout !== undefined) body.timeout = opts.timeout;
      return { path: this.path("/execute"), body };
    }
    if (typeof command !== "string" && !Array.isArray(command)) {
      throw new TypeError("command must be a string (shell code) or an array (argv)");
    }
    const argv = typeof command === "string" ? ["/bin/sh", "-c", command] : command;
    const body: Record<string, unknown> = { argv };
    if (opts.env !== undefined) body.env = opts.env;
    if (opts.cwd !== undefined) body.cwd = opts.cwd;
    if (opts.user !== undefined) body.user = opts.user;
    if (opts.stdin !== undefined) body.stdin = opts.stdin;
    if (opts.timeout !== undefined) body.timeout = opts.timeout;
    return { path: this.path("/exec"), body };
  }

  /**
   * Runs a command and waits for it. A string is shell code (`sh -c`, POST /execute); an
   * array is an argv run as it is (POST /exec). A non-zero exit is a result, not an error.
   */
  async exec(command: string | string[], opts: ExecOptions = {}): Promise<ExecResult> {
    const { path, body } = this.execRequest(command, opts);
    const w = await this.http.json<Record<string, unknown>>("POST", path, { json: body, signal: opts.signal });
    const result = toExecResult(w);
    if (opts.check && result.exitCode !== 0) throw new CommandFailedError(command, result);
    return result;
  }

  /**
   * Runs a command and yields its output as it comes: `stdout` and `stderr` chunks in order,
   * then one `exit` chunk. Breaking out of the loop, or aborting the signal, cancels the
   * request (the daemon then kills the command).
   */
  async *execStream(command: string | string[], opts: ExecOptions = {}): AsyncGenerator<ExecChunk, void, undefined> {
    const { path, body } = this.execRequest(command, opts);
    const label = `POST ${path}`;
    const res = await this.http.send("POST", path, { json: body, query: { stream: "true" }, signal: opts.signal });
    let exited = false;
    for await (const line of iterateLines(res, opts.signal, label)) {
      if (!line.trim()) continue;
      let m: Record<string, unknown>;
      try {
        m = JSON.parse(line) as Record<string, unknown>;
      } catch (err) {
        throw new SandboxerError({ status: 0, code: "invalid_response", detail: `not an ndjson line: ${line.slice(0, 200)}`, request: label, cause: err });
      }
      const output = typeof m.output === "string" ? m.output : "";
      switch (m.type) {
        case "stdout":
        case "stderr":
          yield { type: m.type, data: output };
          break;
        case "exit":
          exited = true;
          yield { type: "exit", exitCode: typeof m.exit_code === "number" ? m.exit_code : -1, timedOut: m.timed_out === true, message: output };
          break;
        case "error":
          throw new StreamError({ status: 0, code: typeof m.code === "string" ? m.code : "exec_failed", detail: output || "the exec failed", request: label, body: m });
        default:
          break; // a chunk type this SDK does not know yet
      }
    }
    if (!exited) {
      opts.signal?.throwIfAborted();
      throw new StreamError({ status: 0, code: "stream_ended", detail: "the exec stream ended before its exit line", request: label });
    }
  }

  // ---- background processes ----

  /**
   * Starts a background process, owned by the sandbox (not by this call): answers at once
   * with a `Process` handle (`wait`, `iterOutput`, `sendStdin`, `kill`...). The process and
   * the last 1 MiB of its output go through a fork, a hibernation or a daemon restart. A
   * string is shell code (`sh -c`), an array an argv (a missing program: a process that
   * exited with 127). At most 64 run at once per sandbox (RateLimitError).
   */
  startProcess(command: string | string[], opts: StartProcessOptions = {}): Promise<Process> {
    return startProcess(this.http, this.id, command, opts);
  }

  /** Its background processes, oldest first (running ones, and the last 64 that ended). */
  processes(opts: RequestOptions = {}): Promise<Process[]> {
    return listProcesses(this.http, this.id, opts);
  }

  /** The background process `pid` (NotFoundError if there is none). */
  process(pid: number, opts: RequestOptions = {}): Promise<Process> {
    return getProcess(this.http, this.id, pid, opts);
  }

  // ---- logs and history ----

  /** The main process's output so far (GET /logs). */
  async output(opts: RequestOptions = {}): Promise<string> {
    const res = await this.http.send("GET", this.path("/logs"), { signal: opts.signal });
    try {
      return await res.text();
    } catch (err) {
      throw wrapError(err, opts.signal, "GET logs");
    }
  }

  /** The main process's output from the start, as text chunks, followed until the process ends. */
  async *followOutput(opts: RequestOptions = {}): AsyncGenerator<string, void, undefined> {
    const res = await this.http.send("GET", this.path("/logs"), { query: { stream: "true" }, signal: opts.signal });
    yield* iterateText(res, opts.signal, `GET ${this.path("/logs")}`);
  }

  /**
   * The execution history as the established SDK's `logs(limit)` answers it: the last
   * `limit` (default 1000) executions with their output, oldest first. See `executions`.
   */
  async logs(opts: { limit?: number } & RequestOptions = {}): Promise<{ executions: Execution[] }> {
    return { executions: await this.executions({ limit: opts.limit, signal: opts.signal }) };
  }

  /** The recorded execs (and terminal sessions) with their output. */
  async executions(opts: ExecutionsOptions = {}): Promise<Execution[]> {
    const route = opts.newestFirst ? "/command-executions" : "/execution-logs";
    const r = await this.http.json<{ executions?: unknown[] }>("GET", this.path(route), { query: { limit: opts.limit }, signal: opts.signal });
    return (r?.executions ?? []).map((e) => toExecution(e as Record<string, unknown>));
  }

  /** One execution's output rows after a cursor (for tailing a running one). */
  async executionLogs(executionId: number, opts: ExecutionLogsOptions = {}): Promise<ExecutionLogPage> {
    const r = await this.http.json<Record<string, unknown>>("GET", this.path(`/command-executions/${executionId}/logs`), {
      query: { start_id: opts.startId, limit: opts.limit },
      signal: opts.signal,
    });
    return {
      execution: toExecution((r.execution ?? {}) as Record<string, unknown>),
      logs: Array.isArray(r.logs) ? r.logs.map((l) => toExecutionLog(l as Record<string, unknown>)) : [],
      nextStartId: typeof r.next_start_id === "number" ? r.next_start_id : null,
    };
  }

  // ---- fork tree ----

  /** Forks it: the child gets its processes, memory and files where CRIU can (see `memoryPreserved`). */
  async fork(options: string | ForkOptions = {}): Promise<Sandbox> {
    const o: ForkOptions = typeof options === "string" ? { label: options } : options;
    const body: Record<string, unknown> = {};
    if (o.label !== undefined) body.label = o.label;
    if (o.hostname !== undefined) body.hostname = o.hostname;
    const w = await this.http.json<Record<string, unknown>>("POST", this.path("/fork"), { json: body, signal: o.signal });
    return new Sandbox(this.http, toSandboxInfo(w));
  }

  /**
   * What it uses now (cgroup, writable layer, veth): `{cpu, memory, pids, disk, network}` as
   * the daemon sends them (snake_case); a hibernated sandbox is not woken, only `disk` is known.
   */
  async stats(opts: RequestOptions = {}): Promise<Record<string, unknown>> {
    return this.http.json<Record<string, unknown>>("GET", this.path("/stats"), { signal: opts.signal });
  }

  /** The fork tree it is part of, from the topmost ancestor. */
  async tree(opts: RequestOptions = {}): Promise<SandboxTree> {
    const r = await this.http.json<{ tree?: string; tree_json?: Record<string, unknown> }>("GET", this.path("/tree"), { signal: opts.signal });
    return { text: r.tree ?? "", root: toTreeNode(r.tree_json ?? {}) };
  }

  /** Keeps `final` (a descendant of this sandbox) and deletes the rest of this subtree. */
  async coalesce(final: string | Sandbox, opts: RequestOptions = {}): Promise<CoalesceResult> {
    const fid = typeof final === "string" ? final : final.id;
    const w = await this.http.json<Record<string, unknown>>("POST", this.path(`/coalesce/${encodeURIComponent(fid)}`), { signal: opts.signal });
    const info = toSandboxInfo(w);
    const kept = typeof final !== "string" ? ((final.info = info), final) : new Sandbox(this.http, info);
    const terminated = Array.isArray(w.terminated_sandboxes) ? w.terminated_sandboxes.map(String) : [];
    if (terminated.includes(this.id)) this.info.status = "terminated";
    return { sandbox: kept, message: typeof w.message === "string" ? w.message : "", terminatedSandboxes: terminated };
  }

  // ---- lifecycle ----

  private async setState(method: string, suffix: string, opts: RequestOptions, json?: unknown): Promise<SandboxStatus> {
    const r = await this.http.json<{ status?: string }>(method, this.path(suffix), { signal: opts.signal, json });
    if (typeof r?.status === "string") this.info.status = r.status;
    return this.info.status;
  }

  /** Freezes every process (cgroup freezer). */
  pause(opts: RequestOptions = {}): Promise<SandboxStatus> {
    return this.setState("PUT", "/pause", opts);
  }

  /** Thaws a paused sandbox. */
  unpause(opts: RequestOptions = {}): Promise<SandboxStatus> {
    return this.setState("DELETE", "/pause", opts);
  }

  /** Checkpoints it to disk and frees its memory; `wake` (or any exec) restores it. */
  hibernate(opts: RequestOptions = {}): Promise<SandboxStatus> {
    return this.setState("POST", "/hibernate", opts);
  }

  /**
   * Restores a hibernated sandbox, its processes where they were. When its memory cannot be
   * restored it starts again from its files (its `lastError` says why, after `refresh()`);
   * `{ cold: true }` asks for that directly.
   */
  wake(opts: RequestOptions & { cold?: boolean } = {}): Promise<SandboxStatus> {
    return this.setState("POST", "/wake", opts, opts.cold ? { cold: true } : undefined);
  }

  /** Keeps a named snapshot (memory included) to start new sandboxes from: `create({snapshot})`. */
  async snapshot(name: string, opts: RequestOptions = {}): Promise<Snapshot> {
    const w = await this.http.json<Record<string, unknown>>("POST", this.path("/snapshots"), { json: { name }, signal: opts.signal });
    return toSnapshot(w);
  }

  /** Deletes it: kills it and removes its container and storage (its row stays, terminated). */
  async terminate(opts: RequestOptions = {}): Promise<void> {
    await this.setState("DELETE", "", opts);
    this.info.status = "terminated";
  }

  /** Same as `terminate`. */
  delete(opts: RequestOptions = {}): Promise<void> {
    return this.terminate(opts);
  }

  /**
   * Polls until the sandbox is in one of `until` (default exited or terminated); answers its
   * description then.
   */
  async wait(opts: WaitOptions = {}): Promise<SandboxInfo> {
    const until = opts.until ?? ["exited", "terminated"];
    const signal = opts.timeout !== undefined ? anySignal(opts.signal, AbortSignal.timeout(opts.timeout)) : opts.signal;
    for (;;) {
      const info = await this.refresh({ signal });
      if (until.includes(info.status)) return info;
      await sleep(opts.interval ?? 250, signal);
    }
  }

  /** This sandbox's events (see `Sandboxer.events`). */
  events(opts: Omit<EventsOptions, "sandbox"> = {}): EventStream {
    return new EventStream(this.http, { ...opts, sandbox: this.id });
  }

  // ---- proxy ----

  /** The proxy URL of a path on the sandbox's HTTP server (optionally a given port). */
  proxyUrl(path = "/", opts: { port?: number } = {}): string {
    const u = this.http.url(this.path(`/proxy/${path.replace(/^\/+/, "")}`), { port: opts.port });
    return u.toString();
  }

  /**
   * fetch() through the proxy to the sandbox's HTTP server, with this client's token. Answers
   * the server's Response whatever its status (the daemon's own errors, e.g. 502 when nothing
   * listens, come as responses too).
   */
  async proxyFetch(path = "/", init: RequestInit & { port?: number } = {}): Promise<Response> {
    const { port, ...rest } = init;
    const headers = new Headers(rest.headers ?? {});
    for (const [k, v] of Object.entries(this.http.headers())) if (!headers.has(k)) headers.set(k, v);
    const withBody = rest.body !== undefined && rest.body !== null;
    return this.http.raw(this.proxyUrl(path, { port }), { ...rest, headers, ...(withBody ? { duplex: "half" as const } : {}) });
  }

  // ---- terminals ----

  private wsUrl(suffix: string, query: Record<string, string | number | undefined>): string {
    const u = this.http.url(this.path(suffix), query);
    u.protocol = u.protocol === "https:" ? "wss:" : "ws:";
    return u.toString();
  }

  /** An interactive shell (or `cmd`) on a PTY in the sandbox. Closing it ends the command. */
  pty(opts: PtyOptions = {}): Promise<Terminal> {
    const url = this.wsUrl("/exec/pty", { cmd: opts.cmd, cols: opts.cols, rows: opts.rows, term: opts.term, cwd: opts.cwd, user: opts.user });
    return openTerminal(url, this.http.headers(), opts.signal);
  }

  /**
   * The console of an interactive sandbox's main process (create with `interactive: true`).
   * The last 16 KiB of output come first; closing detaches and leaves the process running.
   */
  attach(opts: RequestOptions = {}): Promise<Terminal> {
    return openTerminal(this.wsUrl("/attach", {}), this.http.headers(), opts.signal);
  }
}

/** An AbortSignal that aborts when any of the given ones does. @internal */
export function anySignal(...signals: (AbortSignal | undefined)[]): AbortSignal {
  const list = signals.filter((s): s is AbortSignal => s !== undefined);
  if (list.length === 1) return list[0] as AbortSignal;
  const any = (AbortSignal as unknown as { any?: (s: AbortSignal[]) => AbortSignal }).any;
  if (any) return any(list);
  const c = new AbortController();
  for (const s of list) {
    if (s.aborted) {
      c.abort(s.reason);
      break;
    }
    s.addEventListener("abort", () => c.abort(s.reason), { once: true });
  }
  return c.signal;
}
