import type { components } from "./generated/openapi.js";
import { ProblemError, TransportError, problemError } from "./errors.js";

/** The data of a manual-queue change (schema `QueueChange`). */
export type QueueChange = components["schemas"]["QueueChange"];

/** One event of the queue stream. */
export type QueueStreamEvent =
  | {
      /** The stream is live (sent once per connection, after any resume catch-up). */
      event: "ready";
      id?: undefined;
      data: { position: string };
    }
  | {
      /** The change: `added`, `claimed`, `released`, `approved`, `decided`, `requeued`, `held`, `unheld`; types are only added: ignore unknown ones. */
      event: QueueChange["type"];
      /** Its position in the ledger's global order: opaque, resume after it with `lastEventId`. */
      id: string;
      data: QueueChange;
    };

export interface QueueStreamOptions {
  /** Resume after this position (an `id` the stream sent). Without it the stream starts at the ledger's end. */
  lastEventId?: string;
  /** Aborting it ends the stream. */
  signal?: AbortSignal;
  /** Reopen a dropped connection (default true); false ends the iteration instead. */
  reconnect?: boolean;
  /** The wait before reopening, in ms; by default the server's `retry:` (2000 ms). */
  reconnectDelayMs?: number;
  /** Reopen when nothing, not even a heartbeat (every 15 s), arrived for this long (default 45000 ms). */
  idleTimeoutMs?: number;
}

interface Target {
  url: string;
  token: string;
  fetch: typeof fetch;
}

/**
 * The manual queue's server-sent events, read over fetch so that the
 * bearer token is sent, and resumed with `Last-Event-ID` after a dropped
 * connection. Iterate it once with `for await`.
 */
export class QueueStream implements AsyncIterable<QueueStreamEvent> {
  /** The position of the last change received: where a new stream resumes. */
  lastEventId: string | undefined;
  /** How many times the connection was reopened. */
  reconnects = 0;

  readonly #target: Target;
  readonly #options: QueueStreamOptions;
  readonly #stop = new AbortController();
  #serverRetry = 2000;
  #iterated = false;

  constructor(target: Target, options: QueueStreamOptions) {
    this.#target = target;
    this.#options = options;
    this.lastEventId = options.lastEventId;
    if (options.signal) {
      if (options.signal.aborted) this.#stop.abort();
      else options.signal.addEventListener("abort", () => this.#stop.abort(), { once: true });
    }
  }

  /** Ends the stream: the loop reading it finishes. */
  close(): void {
    this.#stop.abort();
  }

  [Symbol.asyncIterator](): AsyncIterator<QueueStreamEvent> {
    if (this.#iterated) throw new Error("a QueueStream can be iterated once");
    this.#iterated = true;
    return this.#run();
  }

  async *#run(): AsyncGenerator<QueueStreamEvent> {
    const reconnect = this.#options.reconnect ?? true;
    const idle = this.#options.idleTimeoutMs ?? 45_000;
    try {
      let retryAfter: number | undefined;
      for (let first = true; ; first = false) {
        if (this.#stop.signal.aborted) return;
        if (!first) {
          await pause(retryAfter ?? this.#options.reconnectDelayMs ?? this.#serverRetry, this.#stop.signal);
          if (this.#stop.signal.aborted) return;
          this.reconnects++;
          retryAfter = undefined;
        }
        const conn = new AbortController();
        let watchdog: ReturnType<typeof setTimeout> | undefined;
        const onStop = () => {
          clearTimeout(watchdog);
          conn.abort();
        };
        this.#stop.signal.addEventListener("abort", onStop, { once: true });
        const touch = () => {
          clearTimeout(watchdog);
          if (this.#stop.signal.aborted) return;
          watchdog = setTimeout(() => conn.abort(), idle);
          watchdog.unref?.();
        };
        try {
          const headers: Record<string, string> = {
            authorization: `Bearer ${this.#target.token}`,
            accept: "text/event-stream",
            "cache-control": "no-cache",
          };
          if (this.lastEventId !== undefined) headers["last-event-id"] = this.lastEventId;
          touch();
          let res: Response;
          try {
            res = await this.#target.fetch(this.#target.url, { headers, signal: conn.signal });
          } catch (err) {
            if (this.#stop.signal.aborted) return;
            if (!reconnect) throw new TransportError(`queue stream: ${String(err)}`, { cause: err });
            continue;
          }
          if (res.status !== 200 || !res.body) {
            let body: unknown;
            try {
              body = JSON.parse(await res.text());
            } catch {
              body = undefined;
            }
            const err = problemError(res.status, body, retryAfterOf(res.headers.get("retry-after")));
            if (reconnect && (res.status === 429 || res.status === 503 || res.status >= 502)) {
              retryAfter = err.retryAfterMs;
              continue;
            }
            throw err;
          }
          try {
            for await (const ev of parseEventStream(res.body, touch)) {
              // Events already read from the connection are not handed
              // out once close() was called: it ends the iteration.
              if (this.#stop.signal.aborted) return;
              if (ev.retry !== undefined) this.#serverRetry = ev.retry;
              if (ev.id !== undefined) this.lastEventId = ev.id;
              if (ev.data === undefined) continue;
              let data: unknown;
              try {
                data = JSON.parse(ev.data);
              } catch {
                continue; // not ours to guess at
              }
              const event = ev.event ?? "message";
              // The id field carries over to later events; ready has none of its own.
              yield { event, id: event === "ready" ? undefined : ev.id, data } as QueueStreamEvent;
            }
          } catch (err) {
            if (this.#stop.signal.aborted) return;
            if (!reconnect) throw new TransportError(`queue stream: ${String(err)}`, { cause: err });
          }
          if (!reconnect) return;
        } finally {
          clearTimeout(watchdog);
          this.#stop.signal.removeEventListener("abort", onStop);
          conn.abort();
        }
      }
    } catch (err) {
      if (err instanceof ProblemError || err instanceof TransportError) throw err;
      if (this.#stop.signal.aborted) return;
      throw err;
    }
  }
}

function retryAfterOf(v: string | null): number | undefined {
  return v !== null && /^\d+$/.test(v.trim()) ? Number(v.trim()) * 1000 : undefined;
}

/** Waits ms, or less when the signal aborts (never rejects). */
function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done, { once: true });
  });
}

/** One dispatched server-sent event: its fields as the event-stream format defines them. */
export interface RawEvent {
  id?: string;
  event?: string;
  data?: string;
  retry?: number;
}

/**
 * Parses a text/event-stream body as the HTML standard says: lines end
 * with CRLF, LF or CR; `data` lines are joined with LF; a blank line
 * dispatches; comments (`:`) are skipped; `id` carries over to later
 * events; a `retry` alone is reported without data. onBytes is called on
 * every chunk (heartbeats included).
 */
export async function* parseEventStream(
  body: ReadableStream<Uint8Array>,
  onBytes: () => void = () => {},
): AsyncGenerator<RawEvent> {
  const decoder = new TextDecoder("utf-8");
  let buf = "";
  let data: string[] = [];
  let event: string | undefined;
  let id: string | undefined;
  let retry: number | undefined;
  let sawCR = false;
  let firstChunk = true;
  const reader = body.getReader();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      onBytes();
      let text = decoder.decode(value, { stream: true });
      if (firstChunk && text.length > 0) {
        if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
        firstChunk = false;
      }
      if (sawCR && text.startsWith("\n")) text = text.slice(1);
      sawCR = false;
      buf += text;
      for (;;) {
        const m = /\r\n|\n|\r/.exec(buf);
        if (!m) break;
        if (m[0] === "\r" && m.index === buf.length - 1) {
          sawCR = true; // a LF may follow in the next chunk
        }
        const line = buf.slice(0, m.index);
        buf = buf.slice(m.index + m[0].length);
        if (line === "") {
          if (data.length > 0 || retry !== undefined) {
            const ev: RawEvent = {};
            if (id !== undefined) ev.id = id;
            if (event !== undefined) ev.event = event;
            if (data.length > 0) ev.data = data.join("\n");
            if (retry !== undefined) ev.retry = retry;
            yield ev;
          }
          data = [];
          event = undefined;
          retry = undefined;
          continue;
        }
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? "" : line.slice(colon + 1);
        if (value.startsWith(" ")) value = value.slice(1);
        switch (field) {
          case "data":
            data.push(value);
            break;
          case "event":
            event = value;
            break;
          case "id":
            if (!value.includes("\0")) id = value;
            break;
          case "retry":
            if (/^\d+$/.test(value)) retry = Number(value);
            break;
        }
      }
    }
  } finally {
    reader.releaseLock();
  }
}
