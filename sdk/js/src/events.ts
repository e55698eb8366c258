/** Events of the caller's sandboxes: an async iterable over SSE, resumed with Last-Event-ID. */
import { ConnectionError, ServerError } from "./errors.js";
import { type RequestOptions, type Transport, iterateLines, sleep } from "./http.js";
import { type SandboxEvent, toEvent } from "./types.js";

/** Options of `events()`. */
export interface EventsOptions extends RequestOptions {
  /** Start after this event (a previous event's `id`); default: from the first one kept. */
  lastEventId?: number | string;
  /** Reconnect (resuming after the last event seen) when the stream drops; default true. */
  reconnect?: boolean;
  /** Milliseconds before a reconnect (default 1000). */
  retryDelay?: number;
  /** Consecutive failed reconnects before giving up (default: never give up). */
  maxRetries?: number;
  /** Only the events of this sandbox (or these). */
  sandbox?: string | { id: string } | (string | { id: string })[];
  /** Only events of these types ("created", "exec", ...). */
  types?: string[];
  /** Only events at or after this Unix time (seconds); `Date.now() / 1000` skips the past. */
  since?: number;
}

/**
 * The events of the caller's sandboxes as an async iterable (SSE underneath). `lastEventId`
 * is the id of the last event yielded: keep it to resume later with `events({lastEventId})`.
 */
export class EventStream implements AsyncIterable<SandboxEvent> {
  /** The id of the last event yielded (or the one it started after). */
  lastEventId: number | undefined;
  private started = false;

  /** @internal */
  constructor(private readonly http: Transport, private readonly opts: EventsOptions) {
    const l = opts.lastEventId;
    this.lastEventId = l === undefined || l === "" ? undefined : Number(l);
    if (this.lastEventId !== undefined && !Number.isInteger(this.lastEventId)) {
      throw new TypeError(`lastEventId must be an event id, not ${JSON.stringify(l)}`);
    }
  }

  private wanted(ev: SandboxEvent): boolean {
    const { sandbox, types, since } = this.opts;
    if (sandbox !== undefined) {
      const ids = (Array.isArray(sandbox) ? sandbox : [sandbox]).map((s) => (typeof s === "string" ? s : s.id));
      if (!ids.includes(ev.sandboxId)) return false;
    }
    if (types && !types.includes(ev.type)) return false;
    if (since !== undefined && ev.timestamp < since) return false;
    return true;
  }

  [Symbol.asyncIterator](): AsyncIterator<SandboxEvent> {
    if (this.started) throw new TypeError("an EventStream can be iterated once; call events() again");
    this.started = true;
    return this.run();
  }

  private async *run(): AsyncGenerator<SandboxEvent, void, undefined> {
    const { signal, reconnect = true, retryDelay = 1000, maxRetries = Infinity } = this.opts;
    let failures = 0;
    let connected = false;
    for (;;) {
      try {
        const headers: Record<string, string> = { accept: "text/event-stream" };
        if (this.lastEventId !== undefined) headers["last-event-id"] = String(this.lastEventId);
        // The daemon skips the history before `since` itself (?since=); wanted() checks too.
        const query = this.lastEventId === undefined && this.opts.since !== undefined ? { since: String(this.opts.since) } : undefined;
        const res = await this.http.send("GET", "/events", { headers, signal, query });
        connected = true;
        failures = 0;
        let id: number | undefined;
        let type = "message";
        let data: string[] = [];
        for await (const line of iterateLines(res, signal, "GET /events")) {
          if (line === "") {
            if (data.length) {
              let payload: Record<string, unknown> = {};
              try {
                payload = JSON.parse(data.join("\n")) as Record<string, unknown>;
              } catch {
                /* not JSON: an empty event */
              }
              const ev = toEvent(id ?? (this.lastEventId ?? 0), type, payload);
              if (id !== undefined) this.lastEventId = id;
              if (this.wanted(ev)) yield ev;
            }
            id = undefined;
            type = "message";
            data = [];
            continue;
          }
          if (line.startsWith(":")) continue; // a comment: hello or heartbeat
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          let value = colon < 0 ? "" : line.slice(colon + 1);
          if (value.startsWith(" ")) value = value.slice(1);
          if (field === "id") {
            const n = Number(value);
            if (value !== "" && Number.isInteger(n)) id = n;
          } else if (field === "event") type = value;
          else if (field === "data") data.push(value);
        }
        // The daemon ended the stream (a restart, a stop): reconnect after the last event.
      } catch (err) {
        if (signal?.aborted) throw signal.reason ?? err;
        const transient = err instanceof ConnectionError || err instanceof ServerError;
        if (!transient || !reconnect || !connected) throw err;
        failures++;
        if (failures > maxRetries) throw err;
      }
      if (!reconnect) return;
      await sleep(retryDelay, signal);
    }
  }
}
