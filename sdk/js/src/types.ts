/**
 * The shapes the SDK answers with. Field names are camelCase (the wire's snake_case
 * translated); times are Unix seconds (floats), as the daemon sends them.
 */
import type { RequestOptions } from "./http.js";

/** A sandbox's state. */
export type SandboxStatus =
  | "creating"
  | "running"
  | "paused"
  | "hibernated"
  | "exited"
  | "terminated"
  | (string & {});

export interface SandboxResources {
  cpus: number;
  /** Bytes. */
  memory: number;
  pids: number;
  /** Bytes, or null when not limited. */
  disk: number | null;
}

/** A sandbox as the daemon describes it (`GET /sandboxes/{id}`). */
export interface SandboxInfo {
  /** 64 hex characters. */
  id: string;
  /** A lowercase ULID; accepted wherever an id is. */
  name: string;
  label: string;
  image: string;
  status: SandboxStatus;
  /** The main process's exit code once it has exited. */
  exitCode: number | null;
  hostname: string;
  ipAddress: string | null;
  parentId: string | null;
  childIds: string[];
  createdAt: number;
  lastActiveAt: number | null;
  deletedAt: number | null;
  deleteReason: string | null;
  isPublic: boolean;
  interactive: boolean;
  url: string | null;
  resources: SandboxResources;
  runtime: string;
  /** Whether it keeps CAP_NET_RAW (asked for at create; forks keep their parent's). */
  netRaw: boolean;
  /** Whether setuid programs (sudo) may gain privileges in it (templates' sandboxes may). */
  setuid: boolean;
  /** The template it was started from, or null. */
  template: string | null;
  /** Only on a fork's answer: whether the child got the parent's processes and memory. */
  memoryPreserved?: boolean;
  /** Why the last change failed or fell back while the sandbox kept working (a wake that
   * could not restore memory, an idle hibernation that failed), or null. */
  lastError: { op: string; detail: string; at: number } | null;
}

/** Options of `Sandboxer.create`. At most one of `image`, `template` and `snapshot`; with none,
 * the template "base" (Debian with python3, node, git, sudo; no registry needed). */
export interface CreateOptions extends RequestOptions {
  /** An image reference, normalised as Docker does ("busybox", "python:3.12"); a bare name that
   * is a template ("base", "code-interpreter") means that template. */
  image?: string;
  /** Start from this template (built in, or built with `POST /templates`). */
  template?: string;
  /** Let setuid programs (sudo) gain privileges (templates' sandboxes have it). */
  setuid?: boolean;
  /** Start from this snapshot (memory included) instead of an image. */
  snapshot?: string;
  label?: string;
  /** Give the main process a terminal (for `attach`). */
  interactive?: boolean;
  env?: Record<string, string>;
  /** The main process; default the image's entrypoint+cmd; with neither the sandbox idles. */
  args?: string[];
  hostname?: string;
  cpus?: number;
  /** Bytes, or a size like "512M". */
  memory?: number | string;
  pids?: number;
  disk?: number | string;
  /** Egress: "none" (only the owner's sandboxes), "open" (NAT) or "proxy" (only the hosts of
   * `egressAllow`, through the daemon's egress proxy). */
  network?: "none" | "open" | "proxy" | (string & {});
  /** With network "proxy": host names, `*.domain` (its subdomains) or IPv4 addresses. */
  egressAllow?: string[];
  /** Keep CAP_NET_RAW (raw sockets: tcpdump, arping); off by default, ping works without it. */
  netRaw?: boolean;
  /** The sandbox's HTTP ports for the proxy. */
  ports?: number[];
  /** Whether the proxy serves this sandbox without a token. */
  public?: boolean;
  /** "runc" (the daemon's default unless its --runtime says otherwise) or "runsc" (gVisor). */
  runtime?: string;
  /** Seconds of inactivity after which the daemon may hibernate it. */
  idleTimeout?: number;
  /** More body fields, sent as they are (for fields this SDK does not know yet). */
  extra?: Record<string, unknown>;
}

/** The result of a finished exec. */
export interface ExecResult {
  stdout: string;
  stderr: string;
  exitCode: number;
  /** Output was cut at the daemon's --exec-output-max. */
  truncated: boolean;
  /** The timeout killed it. */
  timedOut: boolean;
  /** Its row in the execution history. */
  executionId: number | null;
}

/** Options of `exec` and `execStream`. */
export interface ExecOptions extends RequestOptions {
  /** Seconds; the daemon kills the process group past it. */
  timeout?: number;
  /** Environment added for this command. */
  env?: Record<string, string>;
  /** Working directory. */
  cwd?: string;
  /** User name or uid[:gid]. */
  user?: string;
  /** Text fed to the command's standard input (then EOF). */
  stdin?: string;
  /** `exec` only: reject with a CommandFailedError when the exit code is not 0. */
  check?: boolean;
}

/** One piece of a streamed exec, in order. The last one is `exit`. */
export type ExecChunk =
  | { type: "stdout"; data: string }
  | { type: "stderr"; data: string }
  | { type: "exit"; exitCode: number; timedOut: boolean; message: string };

export interface ExecutionLog {
  id: number;
  fd: "stdout" | "stderr";
  content: string;
  createdAt: number;
}

/** One recorded exec (or terminal session) of a sandbox. */
export interface Execution {
  id: number;
  command: string;
  executedAt: number;
  finishedAt: number | null;
  exitCode: number | null;
  logs: ExecutionLog[];
}

export interface ExecutionLogPage {
  execution: Execution;
  logs: ExecutionLog[];
  /** Pass as `startId` to continue after these. */
  nextStartId: number | null;
}

/** A file or directory inside a sandbox. */
export interface FileInfo {
  name: string;
  /** Its absolute path inside the sandbox. */
  path: string;
  /** "file", "dir", "symlink", ... (from stat). */
  type?: string;
  isDir: boolean;
  size: number;
  /** Octal permission bits, e.g. "0644". */
  mode: string;
  mtime: number;
}

export interface TreeNode {
  id: string;
  name: string;
  label: string;
  status: SandboxStatus;
  children: TreeNode[];
}

/** A sandbox's fork tree, from its topmost ancestor. */
export interface SandboxTree {
  /** ASCII art, as the CLI prints it. */
  text: string;
  root: TreeNode;
}

export interface Snapshot {
  id: string;
  name: string;
  sourceId: string;
  image: string;
  memoryPreserved: boolean;
  createdAt: number;
}

export interface Image {
  ref: string;
  digest: string;
  size: number;
  createdAt: number | null;
  pulledAt: number | null;
}

export interface Token {
  id: string;
  name: string;
  user: string;
  createdAt: number;
  lastUsedAt: number | null;
}

/** A token just made: its secret is shown only here. */
export interface NewToken extends Token {
  token: string;
  admin: boolean;
}

/** The caller: its user and the token it used. */
export interface Me {
  id: number;
  name: string;
  admin: boolean;
  createdAt: number;
  token: { id: string; name: string };
}

/** One event of the caller's sandboxes. */
export interface SandboxEvent {
  /** Increasing; resume after it with `events({ lastEventId })`. */
  id: number;
  /** created, exec, forked, coalesced, paused, unpaused, hibernated, woken, updated, exited, deleted, process_started, process_deleted... */
  type: string;
  /** The sandbox it is about (the wire's container_id). */
  sandboxId: string;
  timestamp: number;
  data: Record<string, unknown>;
}

// ---- wire → SDK ----

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Wire = Record<string, any>;

const num = (v: unknown, dflt = 0): number => (typeof v === "number" ? v : dflt);
const numOrNull = (v: unknown): number | null => (typeof v === "number" ? v : null);
const str = (v: unknown, dflt = ""): string => (typeof v === "string" ? v : dflt);
const strOrNull = (v: unknown): string | null => (typeof v === "string" ? v : null);

/** @internal */
export function toSandboxInfo(w: Wire): SandboxInfo {
  const r: Wire = w.resources ?? {};
  const info: SandboxInfo = {
    id: str(w.id),
    name: str(w.name),
    label: str(w.label),
    image: str(w.image),
    status: str(w.status, "running"),
    exitCode: numOrNull(w.exit_code),
    hostname: str(w.hostname),
    ipAddress: strOrNull(w.ip_address),
    parentId: strOrNull(w.parent_id),
    childIds: Array.isArray(w.child_ids) ? w.child_ids.map(String) : [],
    createdAt: num(w.created_at),
    lastActiveAt: numOrNull(w.last_active_at),
    deletedAt: numOrNull(w.deleted_at),
    deleteReason: strOrNull(w.delete_reason),
    isPublic: w.is_public === true,
    interactive: w.interactive === true,
    url: strOrNull(w.url),
    resources: { cpus: num(r.cpus), memory: num(r.memory), pids: num(r.pids), disk: numOrNull(r.disk) },
    runtime: str(w.runtime),
    netRaw: w.net_raw === true,
    setuid: w.setuid === true,
    template: strOrNull(w.template),
    lastError: w.last_error && typeof w.last_error === "object"
      ? { op: str(w.last_error.op), detail: str(w.last_error.detail), at: num(w.last_error.at) }
      : null,
  };
  if (typeof w.memory_preserved === "boolean") info.memoryPreserved = w.memory_preserved;
  return info;
}

/** @internal */
export function toExecResult(w: Wire): ExecResult {
  return {
    stdout: str(w.stdout),
    stderr: str(w.stderr),
    exitCode: num(w.exit_code, -1),
    truncated: w.truncated === true,
    timedOut: w.timed_out === true,
    executionId: numOrNull(w.execution_id),
  };
}

/** @internal */
export function toExecutionLog(w: Wire): ExecutionLog {
  return { id: num(w.id), fd: w.fd === "stderr" ? "stderr" : "stdout", content: str(w.content), createdAt: num(w.created_at) };
}

/** @internal */
export function toExecution(w: Wire): Execution {
  return {
    id: num(w.id),
    command: str(w.command),
    executedAt: num(w.executed_at),
    finishedAt: numOrNull(w.finished_at),
    exitCode: numOrNull(w.exit_code),
    logs: Array.isArray(w.logs) ? w.logs.map(toExecutionLog) : [],
  };
}

/** @internal */
export function toFileInfo(w: Wire): FileInfo {
  const f: FileInfo = {
    name: str(w.name),
    path: str(w.path),
    isDir: w.is_dir === true,
    size: num(w.size),
    mode: str(w.mode),
    mtime: num(w.mtime),
  };
  if (typeof w.type === "string") f.type = w.type;
  return f;
}

/** @internal */
export function toTreeNode(w: Wire): TreeNode {
  return {
    id: str(w.id),
    name: str(w.name),
    label: str(w.label),
    status: str(w.status),
    children: Array.isArray(w.children) ? w.children.map(toTreeNode) : [],
  };
}

/** @internal */
export function toSnapshot(w: Wire): Snapshot {
  return {
    id: str(w.id),
    name: str(w.name),
    sourceId: str(w.source_id),
    image: str(w.image),
    memoryPreserved: w.memory_preserved === true,
    createdAt: num(w.created_at),
  };
}

/** @internal */
export function toImage(w: Wire): Image {
  return { ref: str(w.ref), digest: str(w.digest), size: num(w.size), createdAt: numOrNull(w.created_at), pulledAt: numOrNull(w.pulled_at) };
}

/** @internal */
export function toToken(w: Wire): Token {
  return { id: str(w.id), name: str(w.name), user: str(w.user), createdAt: num(w.created_at), lastUsedAt: numOrNull(w.last_used_at) };
}

/** @internal */
export function toNewToken(w: Wire): NewToken {
  return { ...toToken(w), token: str(w.token), admin: w.admin === true };
}

/** @internal */
export function toMe(w: Wire): Me {
  const t: Wire = w.token ?? {};
  return { id: num(w.id), name: str(w.name), admin: w.admin === true, createdAt: num(w.created_at), token: { id: str(t.id), name: str(t.name) } };
}

/** @internal */
export function toEvent(id: number, type: string, w: Wire): SandboxEvent {
  return {
    id,
    type: str(w.type, type),
    sandboxId: str(w.container_id),
    timestamp: num(w.timestamp),
    data: w.data && typeof w.data === "object" ? (w.data as Record<string, unknown>) : {},
  };
}
