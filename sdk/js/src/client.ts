/** The client: `new Sandboxer({ baseUrl, token })`. */
import { NotFoundError } from "./errors.js";
import { EventStream, type EventsOptions } from "./events.js";
import { type HttpRequest, type RequestOptions, Transport, encodePath } from "./http.js";
import { Sandbox } from "./sandbox.js";
import {
  type CreateOptions,
  type Image,
  type Me,
  type NewToken,
  type SandboxStatus,
  type Snapshot,
  type Token,
  toImage,
  toMe,
  toNewToken,
  toSandboxInfo,
  toSnapshot,
  toToken,
} from "./types.js";

export interface SandboxerOptions {
  /** The daemon's URL; default `SANDBOXER_URL`, else http://127.0.0.1:8000. */
  baseUrl?: string;
  /** A bearer token; default `SANDBOXER_TOKEN`. */
  token?: string;
  /** Headers added to every request. */
  headers?: Record<string, string>;
  /** A fetch to use instead of the global one. */
  fetch?: typeof globalThis.fetch;
}

/** Tokens and users (`/auth/tokens`). */
export class Tokens {
  /** @internal */
  constructor(private readonly http: Transport) {}

  /** A new token: for the caller, or (admins) for `user`, who is created if new (`admin` sets its role). */
  async create(opts: { name?: string; user?: string; admin?: boolean } & RequestOptions = {}): Promise<NewToken> {
    const body: Record<string, unknown> = {};
    if (opts.name !== undefined) body.name = opts.name;
    if (opts.user !== undefined) body.user = opts.user;
    if (opts.admin !== undefined) body.admin = opts.admin;
    return toNewToken(await this.http.json("POST", "/auth/tokens", { json: body, signal: opts.signal }));
  }

  /** The caller's tokens; admins may ask for a `user`'s or `all`. */
  async list(opts: { user?: string; all?: boolean } & RequestOptions = {}): Promise<Token[]> {
    const r = await this.http.json<{ tokens?: unknown[] }>("GET", "/auth/tokens", {
      query: { user: opts.user, all: opts.all ? "true" : undefined },
      signal: opts.signal,
    });
    return (r?.tokens ?? []).map((t) => toToken(t as Record<string, unknown>));
  }

  /** Revokes a token by its id. */
  async delete(id: string, opts: RequestOptions = {}): Promise<void> {
    await this.http.json("DELETE", `/auth/tokens/${encodeURIComponent(id)}`, { signal: opts.signal });
  }
}

/** The image store (`/images`). */
export class Images {
  /** @internal */
  constructor(private readonly http: Transport) {}

  async list(opts: RequestOptions = {}): Promise<Image[]> {
    const r = await this.http.json<{ images?: unknown[] }>("GET", "/images", { signal: opts.signal });
    return (r?.images ?? []).map((i) => toImage(i as Record<string, unknown>));
  }

  /** Pulls an image (through the daemon's registry or mirror). */
  async pull(image: string, opts: RequestOptions = {}): Promise<Image> {
    return toImage(await this.http.json("POST", "/images/pull", { json: { image }, signal: opts.signal }));
  }

  /** Admins: imports an OCI layout or archive from a path on the daemon's host. */
  async import(path: string, opts: { ref?: string } & RequestOptions = {}): Promise<Image> {
    const body: Record<string, unknown> = { path };
    if (opts.ref !== undefined) body.ref = opts.ref;
    return toImage(await this.http.json("POST", "/images/import", { json: body, signal: opts.signal }));
  }

  /** Admins: removes an image. */
  async delete(ref: string, opts: RequestOptions = {}): Promise<void> {
    await this.http.json("DELETE", `/images/${ref.split("/").map(encodeURIComponent).join("/")}`, { signal: opts.signal });
  }
}

/** Snapshots (`/snapshots`); make one with `sandbox.snapshot(name)`, start from it with `create({snapshot})`. */
export class Snapshots {
  /** @internal */
  constructor(private readonly http: Transport) {}

  async list(opts: RequestOptions = {}): Promise<Snapshot[]> {
    const r = await this.http.json<{ snapshots?: unknown[] }>("GET", "/snapshots", { signal: opts.signal });
    return (r?.snapshots ?? []).map((s) => toSnapshot(s as Record<string, unknown>));
  }

  async delete(name: string, opts: RequestOptions = {}): Promise<void> {
    await this.http.json("DELETE", `/snapshots/${encodeURIComponent(name)}`, { signal: opts.signal });
  }
}

const CREATE_FIELDS: Record<string, string> = {
  image: "image",
  snapshot: "snapshot",
  label: "label",
  interactive: "interactive",
  env: "env",
  args: "args",
  hostname: "hostname",
  cpus: "cpus",
  memory: "memory",
  pids: "pids",
  disk: "disk",
  network: "network",
  egressAllow: "egress_allow",
  netRaw: "net_raw",
  template: "template",
  setuid: "setuid",
  ports: "ports",
  public: "public",
  runtime: "runtime",
  idleTimeout: "idle_timeout",
};

/** The body of POST /sandboxes for options. @internal */
export function createBody(opts: CreateOptions): Record<string, unknown> {
  const body: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(opts)) {
    if (v === undefined || k === "signal" || k === "extra") continue;
    const wire = CREATE_FIELDS[k];
    if (!wire) throw new TypeError(`unknown create option ${JSON.stringify(k)} (put new fields in 'extra')`);
    body[wire] = v;
  }
  return { ...body, ...(opts.extra ?? {}) };
}

/**
 * A Sandboxer client.
 *
 * ```ts
 * const sbx = new Sandboxer();                 // SANDBOXER_URL, SANDBOXER_TOKEN
 * const box = await sbx.create({ image: "busybox" });
 * console.log((await box.exec("echo hi")).stdout);
 * await box.terminate();
 * ```
 */
export class Sandboxer {
  readonly baseUrl: string;
  readonly tokens: Tokens;
  readonly images: Images;
  readonly snapshots: Snapshots;
  /** @internal */
  readonly http: Transport;

  constructor(opts: SandboxerOptions = {}) {
    const env = typeof process !== "undefined" ? process.env : {};
    this.http = new Transport({
      baseUrl: opts.baseUrl ?? env.SANDBOXER_URL ?? "http://127.0.0.1:8000",
      token: opts.token ?? env.SANDBOXER_TOKEN,
      headers: opts.headers,
      fetch: opts.fetch,
    });
    this.baseUrl = this.http.baseUrl;
    this.tokens = new Tokens(this.http);
    this.images = new Images(this.http);
    this.snapshots = new Snapshots(this.http);
  }

  /**
   * Creates a sandbox from an image (or a snapshot, or a template) and answers it once it
   * runs. Also takes the reference Sandboxer SDK's positional form,
   * `create("redis", "label", false)` (image, label, interactive), with options after them.
   */
  async create(opts?: CreateOptions): Promise<Sandbox>;
  async create(image: string, label?: string, interactive?: boolean, opts?: CreateOptions): Promise<Sandbox>;
  async create(
    first: CreateOptions | string = {},
    label?: string,
    interactive?: boolean,
    rest: CreateOptions = {},
  ): Promise<Sandbox> {
    let opts: CreateOptions;
    if (typeof first === "string") {
      opts = { ...rest, image: first };
      if (label !== undefined && label !== null) opts.label = label;
      if (interactive !== undefined && interactive !== null) opts.interactive = interactive;
    } else {
      opts = first ?? {};
    }
    const w = await this.http.json<Record<string, unknown>>("POST", "/sandboxes", { json: createBody(opts), signal: opts.signal });
    return new Sandbox(this.http, toSandboxInfo(w));
  }

  /** One sandbox by id or name. */
  async get(id: string, opts: RequestOptions = {}): Promise<Sandbox> {
    const w = await this.http.json<Record<string, unknown>>("GET", `/sandboxes/${encodePath(id)}`, { signal: opts.signal });
    return new Sandbox(this.http, toSandboxInfo(w));
  }

  /**
   * The caller's sandboxes, terminated ones included (status "terminated"); `status` and
   * `label` keep only those that match.
   */
  async list(opts: { status?: SandboxStatus | SandboxStatus[]; label?: string } & RequestOptions = {}): Promise<Sandbox[]> {
    const r = await this.http.json<{ sandboxes?: unknown[] }>("GET", "/sandboxes", { signal: opts.signal });
    const statuses = opts.status === undefined ? undefined : Array.isArray(opts.status) ? opts.status : [opts.status];
    return (r?.sandboxes ?? [])
      .map((s) => new Sandbox(this.http, toSandboxInfo(s as Record<string, unknown>)))
      .filter((s) => (!statuses || statuses.includes(s.status)) && (opts.label === undefined || s.label === opts.label));
  }

  /** Deletes a sandbox by id or name. */
  async delete(id: string, opts: RequestOptions = {}): Promise<void> {
    await this.http.json("DELETE", `/sandboxes/${encodePath(id)}`, { signal: opts.signal });
  }

  /**
   * A handle on a sandbox by id, without asking the daemon (its description is empty until
   * `refresh()`).
   */
  sandbox(id: string): Sandbox {
    const info = toSandboxInfo({ id, status: "unknown" });
    return new Sandbox(this.http, info);
  }

  /**
   * Creates a sandbox, runs fn with it, and deletes it when fn settles (even when fn throws).
   */
  async withSandbox<T>(opts: CreateOptions, fn: (sandbox: Sandbox) => Promise<T> | T): Promise<T> {
    const sandbox = await this.create(opts);
    let failed = false;
    try {
      return await fn(sandbox);
    } catch (err) {
      failed = true;
      throw err;
    } finally {
      try {
        await sandbox.terminate();
      } catch (err) {
        if (!failed && !(err instanceof NotFoundError)) throw err; // fn's own error wins
      }
    }
  }

  /** The events of the caller's sandboxes (see EventStream). */
  events(opts: EventsOptions = {}): EventStream {
    return new EventStream(this.http, opts);
  }

  /** The caller: user and token. */
  async me(opts: RequestOptions = {}): Promise<Me> {
    return toMe(await this.http.json("GET", "/auth/me", { signal: opts.signal }));
  }

  /** GET /healthz: `{status, version}` (no token needed). */
  async health(opts: RequestOptions = {}): Promise<{ status: string; version?: string }> {
    return this.http.json("GET", "/healthz", { signal: opts.signal });
  }

  /** GET /metrics (admins): the Prometheus text exposition. */
  async metrics(opts: RequestOptions = {}): Promise<string> {
    const r = await this.http.send("GET", "/metrics", { signal: opts.signal });
    return await r.text();
  }

  /** GET /readyz: resolves when ready, UnavailableError (503) otherwise. */
  async ready(opts: RequestOptions = {}): Promise<{ status: string; schemaVersion?: number }> {
    const r = await this.http.json<{ status: string; schema_version?: number }>("GET", "/readyz", { signal: opts.signal });
    return { status: r.status, schemaVersion: r.schema_version };
  }

  /**
   * Any route, for what this SDK does not wrap: answers the parsed JSON (or undefined for an
   * empty body); errors are typed as for every call.
   */
  async request<T = unknown>(method: string, path: string, req: HttpRequest = {}): Promise<T> {
    return this.http.json<T>(method, path, req);
  }
}

/**
 * Creates a sandbox, runs fn with it and deletes it afterwards. `client` defaults to a
 * Sandboxer configured from the environment.
 */
export async function withSandbox<T>(
  opts: CreateOptions & { client?: Sandboxer },
  fn: (sandbox: Sandbox) => Promise<T> | T,
): Promise<T> {
  const { client, ...create } = opts;
  return (client ?? new Sandboxer()).withSandbox(create, fn);
}

