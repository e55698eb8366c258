/**
 * Sandboxer's TypeScript SDK: isolated Linux sandboxes from OCI images over HTTP.
 *
 * ```ts
 * import { Sandboxer } from "sandboxer";
 * const sbx = new Sandboxer({ baseUrl: "http://127.0.0.1:8000", token: process.env.SANDBOXER_TOKEN });
 * await sbx.withSandbox({ image: "busybox" }, async (box) => {
 *   const r = await box.exec("echo hello");
 *   console.log(r.stdout, r.exitCode);
 * });
 * ```
 */
import { NotFoundError } from "./errors.js";
import { Sandbox } from "./sandbox.js";

export { Sandboxer, Tokens, Images, Snapshots, withSandbox } from "./client.js";
export type { SandboxerOptions } from "./client.js";
export { EventStream } from "./events.js";
export type { EventsOptions } from "./events.js";
export { Sandbox, SandboxFiles } from "./sandbox.js";
export type {
  CoalesceResult,
  DeleteOptions,
  ExecutionLogsOptions,
  ExecutionsOptions,
  FileContent,
  FileData,
  FileOptions,
  ForkOptions,
  PtyOptions,
  ReadOptions,
  UploadFile,
  WaitOptions,
  WriteOptions,
  WriteResult,
} from "./sandbox.js";
export { Process } from "./processes.js";
export type { FollowOptions, OutputChunk, ProcessInfo, ProcessOutput, StartProcessOptions } from "./processes.js";
export { Terminal } from "./terminal.js";
export type { TerminalExit, DataListener } from "./terminal.js";
export {
  SandboxerError,
  InvalidRequestError,
  UnauthorizedError,
  ForbiddenError,
  NotFoundError,
  ConflictError,
  PayloadTooLargeError,
  UnprocessableError,
  RateLimitError,
  ServerError,
  UnavailableError,
  ConnectionError,
  StreamError,
  BadGatewayError,
  CommandFailedError,
  isAbortError,
} from "./errors.js";
export type { SandboxerErrorInit } from "./errors.js";
export type { RequestOptions, HttpRequest, Query, QueryValue, Body } from "./http.js";
export type {
  CreateOptions,
  ExecChunk,
  ExecOptions,
  ExecResult,
  Execution,
  ExecutionLog,
  ExecutionLogPage,
  FileInfo,
  Image,
  Me,
  NewToken,
  SandboxEvent,
  SandboxInfo,
  SandboxResources,
  SandboxStatus,
  SandboxTree,
  Snapshot,
  Token,
  TreeNode,
} from "./types.js";

// `await using box = await sbx.create(...)` deletes the sandbox at the end of the block, where
// the runtime has Symbol.asyncDispose (Node 22+, or a polyfill loaded before this module).
declare module "./sandbox.js" {
  interface Sandbox {
    [Symbol.asyncDispose](): Promise<void>;
  }
}
const asyncDispose = (Symbol as { asyncDispose?: symbol }).asyncDispose;
if (typeof asyncDispose === "symbol") {
  Object.defineProperty(Sandbox.prototype, asyncDispose, {
    value: async function (this: Sandbox): Promise<void> {
      try {
        await this.terminate();
      } catch (err) {
        if (!(err instanceof NotFoundError)) throw err;
      }
    },
    writable: true,
    configurable: true,
  });
}
