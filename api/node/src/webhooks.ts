import { createHmac, timingSafeEqual } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { components } from "./generated/openapi.js";
import { WebhookVerificationError } from "./errors.js";

/** The body of a decision webhook (schema `WebhookEvent`). */
export type WebhookBody = components["schemas"]["WebhookEvent"];

/** A verified decision webhook. */
export interface WebhookEvent {
  /** The webhook-id: the same on every redelivery of the event. De-duplicate by it. */
  id: string;
  /** `review.decided` (final) or `review.manual_review` (a `review.decided` follows); ignore others. */
  type: WebhookBody["type"] | (string & {});
  /** When the change was recorded in the ledger. */
  timestamp: string;
  /** The review right after the change; its `version` orders one review's events. */
  review: WebhookBody["data"];
}

/** Headers as node:http, fetch or a plain object hold them. */
export type HeaderSource =
  | { get(name: string): string | null }
  | Record<string, string | string[] | undefined>;

export interface VerifyOptions {
  /** How far the webhook-timestamp may be from now, in seconds (default 300, as Standard Webhooks says). */
  toleranceSeconds?: number;
  /** The clock, in epoch ms; Date.now by default. */
  now?: () => number;
}

/**
 * Verifies a decision webhook as the Standard Webhooks specification
 * says (the HMAC-SHA256 of `<webhook-id>.<webhook-timestamp>.<body>`
 * keyed with the secret, in constant time, and a timestamp within the
 * tolerance) and returns the event. rawBody must be the bytes as
 * received: parse nothing before. Throws a WebhookVerificationError
 * naming the header at fault.
 */
export function verifyWebhook(
  rawBody: string | Uint8Array,
  headers: HeaderSource,
  secret: string,
  options: VerifyOptions = {},
): WebhookEvent {
  const key = secretKey(secret);
  const id = header(headers, "webhook-id");
  const ts = header(headers, "webhook-timestamp");
  const sigs = header(headers, "webhook-signature");
  if (!id) throw new WebhookVerificationError("missing webhook-id");
  if (!ts) throw new WebhookVerificationError("missing webhook-timestamp");
  if (!sigs) throw new WebhookVerificationError("missing webhook-signature");
  if (!/^\d+$/.test(ts)) throw new WebhookVerificationError("webhook-timestamp is not a Unix time");
  const tolerance = options.toleranceSeconds ?? 300;
  const now = (options.now ?? Date.now)() / 1000;
  if (Math.abs(now - Number(ts)) > tolerance) {
    throw new WebhookVerificationError(`webhook-timestamp is more than ${tolerance} s off`);
  }
  const body = typeof rawBody === "string" ? Buffer.from(rawBody, "utf8") : Buffer.from(rawBody.buffer, rawBody.byteOffset, rawBody.byteLength);
  const mac = createHmac("sha256", key).update(`${id}.${ts}.`).update(body).digest();
  let ok = false;
  for (const sig of sigs.split(" ")) {
    const comma = sig.indexOf(",");
    if (comma < 0 || sig.slice(0, comma) !== "v1") continue;
    const got = Buffer.from(sig.slice(comma + 1), "base64");
    if (got.length === mac.length && timingSafeEqual(got, mac)) ok = true;
  }
  if (!ok) throw new WebhookVerificationError("webhook-signature does not verify");
  let parsed: WebhookBody;
  try {
    parsed = JSON.parse(body.toString("utf8")) as WebhookBody;
  } catch {
    throw new WebhookVerificationError("the body is not JSON");
  }
  if (typeof parsed !== "object" || parsed === null || typeof parsed.type !== "string" || typeof parsed.data !== "object") {
    throw new WebhookVerificationError("the body is not a decision webhook");
  }
  return { id, type: parsed.type, timestamp: parsed.timestamp, review: parsed.data };
}

function secretKey(secret: string): Buffer {
  const b64 = secret.startsWith("whsec_") ? secret.slice("whsec_".length) : secret;
  const key = Buffer.from(b64, "base64");
  if (key.length === 0 || !/^[A-Za-z0-9+/]+={0,2}$/.test(b64)) {
    throw new TypeError("webhook secret: must be whsec_ and base64 (REVIEWLEDGER_NOTIFY_SECRET)");
  }
  return key;
}

function header(h: HeaderSource, name: string): string | undefined {
  if (typeof (h as { get?: unknown }).get === "function") {
    return (h as { get(name: string): string | null }).get(name) ?? undefined;
  }
  const rec = h as Record<string, string | string[] | undefined>;
  let v = rec[name];
  if (v === undefined) {
    const k = Object.keys(rec).find((k) => k.toLowerCase() === name);
    if (k !== undefined) v = rec[k];
  }
  return Array.isArray(v) ? v[0] : v;
}

/** Remembers the webhook-ids handled, to drop redeliveries. Share one between a receiver's replicas. */
export interface SeenStore {
  has(id: string): boolean | Promise<boolean>;
  add(id: string): void | Promise<void>;
}

/** A SeenStore in this process's memory, forgetting IDs after `ttlMs` (default 48 hours). */
export class MemorySeenStore implements SeenStore {
  readonly #ttl: number;
  readonly #now: () => number;
  readonly #seen = new Map<string, number>();
  /** now is the clock, in epoch ms (Date.now by default). */
  constructor(ttlMs = 48 * 3600 * 1000, now: () => number = Date.now) {
    this.#ttl = ttlMs;
    this.#now = now;
  }
  has(id: string): boolean {
    const at = this.#seen.get(id);
    return at !== undefined && this.#now() - at < this.#ttl;
  }
  add(id: string): void {
    const now = this.#now();
    this.#seen.set(id, now);
    for (const [k, at] of this.#seen) {
      if (now - at < this.#ttl) break; // oldest first: the rest are younger
      this.#seen.delete(k);
    }
  }
}

export interface WebhookHandlerOptions extends VerifyOptions {
  /** REVIEWLEDGER_NOTIFY_SECRET: `whsec_` and base64. */
  secret: string;
  /** Called once per event (not for redeliveries of one handled). Resolve when handled; a rejection is answered 500 and the event comes again later. */
  onEvent: (event: WebhookEvent) => void | Promise<void>;
  /** The handled webhook-ids; a MemorySeenStore by default. */
  seen?: SeenStore;
  /** The largest body accepted, in bytes (default 1 MiB). */
  maxBodyBytes?: number;
  /** Called with each refused request's reason (a bad signature, a failing onEvent), for logging. */
  onError?: (err: unknown, req: IncomingMessage) => void;
}

/**
 * A request handler for node:http (and Express, mounted before any body
 * parser) for the webhook URL. For each POST it verifies the signature
 * (401 otherwise), answers a webhook-id already handled 200 without
 * calling onEvent, one being handled now 503 with Retry-After, and calls
 * onEvent: resolved, the ID is remembered and the answer is 204;
 * rejected, 500, and reviewledger sends it again later. Answer quickly:
 * an onEvent outlasting REVIEWLEDGER_NOTIFY_TIMEOUT (10 s) counts as a
 * failed delivery.
 */
export function createWebhookHandler(options: WebhookHandlerOptions): (req: IncomingMessage, res: ServerResponse) => void {
  secretKey(options.secret); // refuse a bad secret now, not on the first webhook
  const seen = options.seen ?? new MemorySeenStore();
  const maxBody = options.maxBodyBytes ?? 1 << 20;
  const busy = new Set<string>();
  const answer = (res: ServerResponse, status: number, text?: string, headers: Record<string, string> = {}) => {
    res.writeHead(status, text === undefined ? headers : { "content-type": "text/plain; charset=utf-8", ...headers });
    res.end(text);
  };
  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    if (req.method !== "POST") return answer(res, 405, "webhooks are POSTed\n", { allow: "POST" });
    const raw = await readBody(req, maxBody);
    if (raw === undefined) return answer(res, 413, "body too large\n", { connection: "close" });
    let event: WebhookEvent;
    try {
      event = verifyWebhook(raw, req.headers, options.secret, options);
    } catch (err) {
      options.onError?.(err, req);
      return answer(res, 401, `${(err as Error).message}\n`);
    }
    if (busy.has(event.id)) return answer(res, 503, "this webhook is being handled\n", { "retry-after": "1" });
    busy.add(event.id);
    try {
      if (await seen.has(event.id)) return answer(res, 200); // a redelivery, handled before
      try {
        await options.onEvent(event);
      } catch (err) {
        options.onError?.(err, req);
        return answer(res, 500, "not handled\n");
      }
      await seen.add(event.id);
      return answer(res, 204);
    } finally {
      busy.delete(event.id);
    }
  };
  return (req, res) => {
    handle(req, res).catch((err: unknown) => {
      options.onError?.(err, req);
      if (!res.headersSent) answer(res, 500, "not handled\n");
      else res.destroy();
    });
  };
}

/** The body, or undefined when it is larger than max. A body already read by a framework (a Buffer or string `req.body`) is used as it is. */
async function readBody(req: IncomingMessage, max: number): Promise<Buffer | undefined> {
  const pre = (req as IncomingMessage & { body?: unknown }).body;
  if (Buffer.isBuffer(pre)) return pre.length > max ? undefined : pre;
  if (typeof pre === "string") return Buffer.byteLength(pre) > max ? undefined : Buffer.from(pre, "utf8");
  const declared = Number(req.headers["content-length"]);
  if (Number.isFinite(declared) && declared > max) {
    req.resume();
    return undefined;
  }
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    const b = chunk as Buffer;
    size += b.length;
    if (size > max) {
      req.resume();
      return undefined;
    }
    chunks.push(b);
  }
  return Buffer.concat(chunks);
}
