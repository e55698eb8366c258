/**
 * Typed errors. Every error the daemon answers with (`{"code", "detail"}` and an HTTP status)
 * becomes a {@link SandboxerError} subclass chosen by the status; failures that never reached
 * the daemon are {@link ConnectionError}s. An aborted call rejects with the signal's reason
 * (a `DOMException` named `AbortError` or `TimeoutError`), never with a SandboxerError.
 */

export interface SandboxerErrorInit {
  /** The HTTP status; 0 when the error did not come with one (a stream's error line). */
  status: number;
  /** The daemon's machine code, e.g. `not_found`, `invalid_json`. */
  code: string;
  /** The daemon's human sentence. */
  detail: string;
  /** The method and path of the request, for messages. */
  request?: string;
  /** The parsed error body, when there was one. */
  body?: unknown;
  cause?: unknown;
}

/** The base of every error this SDK throws (aborts excepted). */
export class SandboxerError extends Error {
  readonly status: number;
  readonly code: string;
  readonly detail: string;
  readonly request: string | undefined;
  readonly body: unknown;

  constructor(init: SandboxerErrorInit) {
    const where = init.request ? ` (${init.request})` : "";
    const status = init.status ? `${init.status} ` : "";
    super(`${status}${init.code}: ${init.detail}${where}`, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = new.target.name;
    this.status = init.status;
    this.code = init.code;
    this.detail = init.detail;
    this.request = init.request;
    this.body = init.body;
  }
}

/** 400: bad JSON, a wrong type, an unknown value, an empty command... */
export class InvalidRequestError extends SandboxerError {}
/** 401: no token, or a wrong one. */
export class UnauthorizedError extends SandboxerError {}
/** 403: an admin-only route, or a file the sandbox's user may not touch. */
export class ForbiddenError extends SandboxerError {}
/** 404: no such sandbox (also another owner's), file, token, snapshot or image. */
export class NotFoundError extends SandboxerError {}
/** 409: the wrong state for this, e.g. exec on a paused sandbox. */
export class ConflictError extends SandboxerError {}
/** 413: the body is larger than the daemon's --body-limit. */
export class PayloadTooLargeError extends SandboxerError {}
/** 422: an image that cannot be pulled or used. */
export class UnprocessableError extends SandboxerError {}
/** 429: a limit, e.g. too many concurrent execs. */
export class RateLimitError extends SandboxerError {}
/** 5xx: the daemon failed. */
export class ServerError extends SandboxerError {}
/** 503: the daemon is not ready. */
export class UnavailableError extends ServerError {}
/** The daemon could not be reached, or the connection broke mid-answer. */
export class ConnectionError extends SandboxerError {}
/** An error line inside a 200 stream (an exec stream's `{"type":"error"}`), or a stream cut short. */
export class StreamError extends SandboxerError {}
/** 502/504: the sandbox's server did not answer (the proxy). */
export class BadGatewayError extends ServerError {}

/** `exec(..., { check: true })` of a command that exited non-zero; `result` has its output. */
export class CommandFailedError extends SandboxerError {
  readonly result: { stdout: string; stderr: string; exitCode: number; timedOut: boolean };
  readonly command: string | string[];

  constructor(command: string | string[], result: { stdout: string; stderr: string; exitCode: number; timedOut: boolean }) {
    const shown = typeof command === "string" ? command : command.join(" ");
    super({
      status: 0,
      code: "command_failed",
      detail: `${shown.slice(0, 200)} exited with ${result.exitCode}${result.timedOut ? " (timed out)" : ""}`,
    });
    this.command = command;
    this.result = result;
  }
}

/** The SandboxerError subclass for an HTTP status. */
export function errorClassFor(status: number): typeof SandboxerError {
  switch (status) {
    case 400:
      return InvalidRequestError;
    case 401:
      return UnauthorizedError;
    case 403:
      return ForbiddenError;
    case 404:
      return NotFoundError;
    case 409:
      return ConflictError;
    case 413:
      return PayloadTooLargeError;
    case 422:
      return UnprocessableError;
    case 429:
      return RateLimitError;
    case 502:
    case 504:
      return BadGatewayError;
    case 503:
      return UnavailableError;
    default:
      return status >= 500 ? ServerError : SandboxerError;
  }
}

/** An error for a status and the daemon's error body (or whatever text came instead). */
export function errorFromResponse(status: number, body: unknown, request?: string, statusText = ""): SandboxerError {
  let code = `http_${status}`;
  let detail = statusText || `HTTP ${status}`;
  if (body && typeof body === "object") {
    const b = body as Record<string, unknown>;
    if (typeof b.code === "string") code = b.code;
    if (typeof b.detail === "string") detail = b.detail;
  } else if (typeof body === "string" && body.trim()) {
    detail = body.trim().slice(0, 500);
  }
  const Cls = errorClassFor(status);
  return new Cls({ status, code, detail, request, body });
}

/** True for the rejection of an aborted call (AbortError or TimeoutError). */
export function isAbortError(err: unknown): boolean {
  return (
    err instanceof Error && (err.name === "AbortError" || err.name === "TimeoutError")
  );
}
