/**
 * The HTTP layer: Node's built-in fetch (undici), bearer auth, JSON in and out, typed errors,
 * and the stream readers (bytes, text, lines) the routes that stream are read with.
 * @internal
 */
import { ConnectionError, SandboxerError, errorFromResponse, isAbortError } from "./errors.js";

/** Options every call takes. */
export interface RequestOptions {
  /** Cancels the call (and, for a stream, the stream): the call rejects with the signal's reason. */
  signal?: AbortSignal;
}

export type QueryValue = string | number | boolean | undefined | null;
export type Query = Record<string, QueryValue>;

/** A request body fetch accepts. */
export type Body = string | Uint8Array | ArrayBuffer | Blob | FormData | ReadableStream<Uint8Array>;

export interface HttpRequest extends RequestOptions {
  query?: Query;
  /** A value sent as JSON. */
  json?: unknown;
  /** A raw body (exclusive with json). */
  body?: Body;
  headers?: Record<string, string>;
}

export interface TransportOptions {
  baseUrl: string;
  token?: string | undefined;
  headers?: Record<string, string> | undefined;
  fetch?: typeof globalThis.fetch | undefined;
}

export const USER_AGENT = "sandboxer-js/0.1.0";

/** Path segments joined, each percent-encoded. */
export function encodePath(...segments: string[]): string {
  return segments.map((s) => encodeURIComponent(s)).join("/");
}

/** A path inside a sandbox as the files route wants it: each segment encoded, no leading '/'. */
export function encodeFilePath(path: string): string {
  return path
    .split("/")
    .filter((s) => s !== "")
    .map((s) => encodeURIComponent(s))
    .join("/");
}

/** @internal */
export class Transport {
  readonly baseUrl: string;
  readonly token: string | undefined;
  private readonly extraHeaders: Record<string, string>;
  private readonly fetchImpl: typeof globalThis.fetch;

  constructor(opts: TransportOptions) {
    this.baseUrl = opts.baseUrl.replace(/\/+$/, "");
    this.token = opts.token || undefined;
    this.extraHeaders = { ...(opts.headers ?? {}) };
    this.fetchImpl = opts.fetch ?? globalThis.fetch;
    if (!/^https?:\/\//i.test(this.baseUrl)) {
      throw new TypeError(`baseUrl must be an http:// or https:// URL, not ${JSON.stringify(opts.baseUrl)}`);
    }
  }

  private dispatcher: unknown = undefined;

  /**
   * Node's fetch gives up on an answer whose headers take 5 minutes (a long exec) or a body
   * silent for 5 minutes (a quiet stream). With the global fetch, requests go through an
   * undici Agent of fetch's own class without those timeouts; cancel with an AbortSignal
   * instead. The class is found once fetch has made its global dispatcher (after the first
   * request of the process); a custom `fetch` is left alone.
   */
  private patientDispatcher(): unknown {
    if (this.dispatcher !== undefined || this.fetchImpl !== globalThis.fetch) return this.dispatcher ?? undefined;
    const global = (globalThis as Record<symbol, unknown>)[Symbol.for("undici.globalDispatcher.1")];
    const Agent = (global as { constructor?: unknown } | undefined)?.constructor;
    if (typeof Agent !== "function") return undefined; // not yet: the next request looks again
    try {
      this.dispatcher = Agent.name === "Agent" ? new (Agent as new (o: object) => unknown)({ headersTimeout: 0, bodyTimeout: 0 }) : null;
    } catch {
      this.dispatcher = null;
    }
    return this.dispatcher ?? undefined;
  }

  url(path: string, query?: Query): URL {
    const u = new URL(this.baseUrl + (path.startsWith("/") ? path : "/" + path));
    for (const [k, v] of Object.entries(query ?? {})) {
      if (v === undefined || v === null) continue;
      u.searchParams.set(k, String(v));
    }
    return u;
  }

  /** The headers of every request (auth included). */
  headers(extra?: Record<string, string>): Record<string, string> {
    const h: Record<string, string> = { "user-agent": USER_AGENT, ...this.extraHeaders };
    if (this.token) h.authorization = `Bearer ${this.token}`;
    return { ...h, ...(extra ?? {}) };
  }

  /** fetch() with this client's fetch and dispatcher, as it is (any status answers). */
  async raw(url: string | URL, init: RequestInit & { duplex?: "half" }): Promise<Response> {
    const dispatcher = this.patientDispatcher();
    const full = (dispatcher ? { ...init, dispatcher } : init) as RequestInit;
    try {
      return await this.fetchImpl(url, full);
    } catch (err) {
      throw wrapError(err, init.signal ?? undefined, `${init.method ?? "GET"} ${new URL(url).pathname}`);
    }
  }

  /** Sends a request; answers the Response when it is a 2xx, throws a SandboxerError otherwise. */
  async send(method: string, path: string, req: HttpRequest = {}): Promise<Response> {
    const url = this.url(path, req.query);
    const headers = this.headers(req.headers);
    let body: Body | undefined;
    if (req.json !== undefined) {
      body = JSON.stringify(req.json);
      headers["content-type"] = "application/json";
    } else if (req.body !== undefined) {
      body = req.body;
    }
    const label = `${method} ${url.pathname}`;
    req.signal?.throwIfAborted();
    const init: Omit<RequestInit, "dispatcher"> & { duplex?: "half"; dispatcher?: unknown } = { method, headers, signal: req.signal ?? null };
    const dispatcher = this.patientDispatcher();
    if (dispatcher) init.dispatcher = dispatcher;
    if (body !== undefined) {
      init.body = body as RequestInit["body"];
      if (body instanceof ReadableStream) init.duplex = "half";
    }
    let res: Response;
    try {
      res = await this.fetchImpl(url, init as RequestInit);
    } catch (err) {
      throw wrapError(err, req.signal, label);
    }
    if (!res.ok) {
      let parsed: unknown;
      try {
        const text = await res.text();
        try {
          parsed = JSON.parse(text);
        } catch {
          parsed = text;
        }
      } catch (err) {
        if (isAbortError(err) || req.signal?.aborted) throw wrapError(err, req.signal, label);
        parsed = undefined;
      }
      throw errorFromResponse(res.status, parsed, label, res.statusText);
    }
    return res;
  }

  /** Sends a request and answers its JSON body. */
  async json<T = unknown>(method: string, path: string, req: HttpRequest = {}): Promise<T> {
    const res = await this.send(method, path, req);
    const label = `${method} ${path}`;
    let text: string;
    try {
      text = await res.text();
    } catch (err) {
      throw wrapError(err, req.signal, label);
    }
    if (!text) return undefined as T;
    try {
      return JSON.parse(text) as T;
    } catch (err) {
      throw new SandboxerError({ status: res.status, code: "invalid_response", detail: "the daemon's answer is not JSON", request: label, cause: err });
    }
  }
}

/**
 * What a failed fetch or body read becomes: the abort reason for an aborted call (so that
 * `err.name === "AbortError"` holds), a SandboxerError as it is, else a ConnectionError.
 */
export function wrapError(err: unknown, signal: AbortSignal | undefined, request?: string): unknown {
  if (signal?.aborted) return signal.reason ?? err;
  if (isAbortError(err) || err instanceof SandboxerError) return err;
  const cause = (err as { cause?: unknown })?.cause;
  const msg =
    (cause instanceof Error && cause.message) || (err instanceof Error && err.message) || String(err);
  return new ConnectionError({ status: 0, code: "connection_failed", detail: msg, request, cause: err });
}

/** The body's byte chunks; errors become SandboxerErrors (or the abort reason). */
export async function* iterateBody(res: Response, signal?: AbortSignal, request?: string): AsyncGenerator<Uint8Array> {
  if (!res.body) return;
  const reader = res.body.getReader();
  try {
    for (;;) {
      let r: { done: boolean; value?: Uint8Array | undefined };
      try {
        r = await reader.read();
      } catch (err) {
        throw wrapError(err, signal, request);
      }
      if (r.done) return;
      if (r.value && r.value.byteLength) yield r.value;
    }
  } finally {
    // An early exit (break, throw, abort) stops the download and frees the connection.
    reader.cancel().catch(() => {});
  }
}

/** The body as text chunks, UTF-8 decoded across chunk boundaries. */
export async function* iterateText(res: Response, signal?: AbortSignal, request?: string): AsyncGenerator<string> {
  const dec = new TextDecoder("utf-8");
  for await (const chunk of iterateBody(res, signal, request)) {
    const s = dec.decode(chunk, { stream: true });
    if (s) yield s;
  }
  const tail = dec.decode();
  if (tail) yield tail;
}

/** The body's lines, without their line ends (\n or \r\n); a last unterminated line too. */
export async function* iterateLines(res: Response, signal?: AbortSignal, request?: string): AsyncGenerator<string> {
  let buf = "";
  for await (const text of iterateText(res, signal, request)) {
    buf += text;
    let i: number;
    while ((i = buf.indexOf("\n")) >= 0) {
      let line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      if (line.endsWith("\r")) line = line.slice(0, -1);
      yield line;
    }
  }
  if (buf) yield buf.endsWith("\r") ? buf.slice(0, -1) : buf;
}

/** Resolves after ms, or rejects with the signal's reason when it aborts first. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal?.reason);
    };
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
