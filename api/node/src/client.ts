import type { components, operations } from "./generated/openapi.js";
import {
  DeadlineExceededError,
  ProblemError,
  ReviewledgerError,
  TransportError,
  UnavailableError,
  problemError,
} from "./errors.js";
import { QueueStream, type QueueStreamOptions } from "./stream.js";

type Schemas = components["schemas"];

/** A review as the API shows it (`GET /v1/reviews/{id}`, schema `Review`). */
export type Review = Schemas["Review"];
/** Where a review stands. */
export type ReviewState = Review["state"];
/** The body of a submit (schema `SubmitRequest`). */
export type Submission = Schemas["SubmitRequest"];
/** A review's stored events (`GET /v1/reviews/{id}/events`). */
export type ReviewEvents = Schemas["Events"];
/** What a review panel shows (`GET /v1/reviews/{id}/timeline`). */
export type Timeline = Schemas["Timeline"];
/** The manual queue (`GET /v1/manual-queue`). */
export type ManualQueue = Schemas["ManualQueue"];
export type ManualQueueItem = Schemas["ManualQueueItem"];
/** The query of `GET /v1/manual-queue`. */
export type ManualQueueQuery = NonNullable<operations["listManualQueue"]["parameters"]["query"]>;
export type Claim = Schemas["Claim"];
export type Release = Schemas["Release"];
/** A moderator's decision (schema `Decision`). */
export type Decision = Schemas["Decision"];
/** A requeue's body (schema `Requeue`). */
export type RequeueRequest = Schemas["Requeue"];
/** A requeued review: the review view with its new round. */
export type Requeued = Schemas["Requeued"];
export type HoldRequest = Schemas["HoldRequest"];
export type Hold = Schemas["Hold"];
/** A bulk action's selection (schema `BulkRequest`): a filter or items, `dry_run` to count only. */
export type BulkRequest = Schemas["BulkRequest"];
export type BulkResult = Schemas["BulkResult"];
/** Who the token signs in as (`GET /v1/me`). */
export type Me = Schemas["Me"];

/** The states a review leaves `pending` for. */
export const SETTLED_STATES: readonly ReviewState[] = ["accepted", "rejected", "manual_review"];

/** The longest wait the server grants one long-poll request, in seconds. */
export const MAX_WAIT_SECONDS = 60;

export interface ClientOptions {
  /** reviewledger's address, such as `http://reviewledger:8080`. */
  baseUrl: string;
  /** A bearer token of the role the calls need (submitter, moderator, auditor, or admin). */
  token: string;
  /** The fetch to use; the global one by default. */
  fetch?: typeof fetch;
  /** How many times a failing try is repeated when no deadline bounds the call (default 5). */
  retries?: number;
  /** The wait before the first retry, in ms (default 200); it doubles up to `backoffMaxMs`, less up to half at random. */
  backoffInitialMs?: number;
  /** The longest wait between tries, in ms (default 5000); a longer Retry-After is still honoured. */
  backoffMaxMs?: number;
  /** How long one try may take beyond the wait it asks the server for, in ms (default 30000). */
  requestTimeoutMs?: number;
  /** The wait each long-poll asks for, in seconds (1 to 60, default 60). */
  waitSeconds?: number;
  /** The default deadline of `submit`, in ms from the call (default 30000). */
  submitTimeoutMs?: number;
  /** A source of randomness in [0, 1) for the jitter; Math.random by default. */
  random?: () => number;
}

/** When to give up: a Date, or milliseconds from the call. */
export type Deadline = Date | number;

export interface CallOptions {
  /** Aborting it abandons the call: it rejects with the signal's reason. */
  signal?: AbortSignal;
}

export interface SubmitOptions extends CallOptions {
  /**
   * When to give up (default `submitTimeoutMs` from now): a try is
   * started only while the deadline leaves time for it, the try in
   * flight is cut at the deadline, and then `submit` rejects with a
   * DeadlineExceededError, never with a decision.
   */
  deadline?: Deadline;
  /**
   * At most this many retries (default: as many as the deadline leaves
   * time for); past them the last failure is thrown (a TransportError or
   * an UnavailableError).
   */
  retries?: number;
}

export interface SubmitResult {
  /** The review as the server answered: `pending` when new. */
  review: Review;
  /** True when this call's answer created the review (202); false when it existed (200). */
  created: boolean;
  /** How many requests the call sent. */
  tries: number;
}

export interface WaitOptions extends CallOptions {
  /** Give up then with a DeadlineExceededError; without one it waits until the signal aborts. */
  deadline?: Deadline;
}

/** The failures worth another try: no answer at all, or 429 and 503 (which say when, with Retry-After). */
export function isRetryable(err: unknown): boolean {
  return err instanceof TransportError || err instanceof UnavailableError;
}

/**
 * The client of reviewledger's HTTP API. One client carries one token:
 * make one per role (a submitter's for the platform, a moderator's for
 * the queue). Safe for concurrent use.
 */
export class Client {
  readonly #base: string;
  readonly #token: string;
  readonly #fetch: typeof fetch;
  readonly #retries: number;
  readonly #backoffInitial: number;
  readonly #backoffMax: number;
  readonly #requestTimeout: number;
  readonly #waitSeconds: number;
  readonly #submitTimeout: number;
  readonly #random: () => number;

  constructor(options: ClientOptions) {
    let url: URL;
    try {
      url = new URL(options.baseUrl);
    } catch {
      throw new TypeError(`reviewledger client: baseUrl must be an http or https URL, got ${JSON.stringify(options.baseUrl)}`);
    }
    if (url.protocol !== "http:" && url.protocol !== "https:") {
      throw new TypeError(`reviewledger client: baseUrl must be an http or https URL, got ${JSON.stringify(options.baseUrl)}`);
    }
    if (!options.token) throw new TypeError("reviewledger client: token is required");
    this.#base = options.baseUrl.replace(/\/+$/, "");
    this.#token = options.token;
    this.#fetch = options.fetch ?? globalThis.fetch;
    this.#retries = options.retries ?? 5;
    this.#backoffInitial = options.backoffInitialMs ?? 200;
    this.#backoffMax = options.backoffMaxMs ?? 5000;
    this.#requestTimeout = options.requestTimeoutMs ?? 30_000;
    this.#waitSeconds = options.waitSeconds ?? MAX_WAIT_SECONDS;
    this.#submitTimeout = options.submitTimeoutMs ?? 30_000;
    this.#random = options.random ?? Math.random;
    if (!Number.isInteger(this.#waitSeconds) || this.#waitSeconds < 1 || this.#waitSeconds > MAX_WAIT_SECONDS) {
      throw new RangeError(`reviewledger client: waitSeconds must be a whole number from 1 to ${MAX_WAIT_SECONDS}, got ${this.#waitSeconds}`);
    }
    if (this.#backoffInitial < 0 || this.#backoffMax < this.#backoffInitial) {
      throw new RangeError("reviewledger client: backoffMaxMs must be at least backoffInitialMs");
    }
  }

  /**
   * Submits a review (`POST /v1/reviews`). The review ID is the
   * idempotency key: every try sends the same body, so a review stored by
   * a try whose answer was lost comes back as existing (`created` false).
   * Connection failures and 429/503 are tried again, with exponential
   * backoff and jitter and never sooner than the server's Retry-After,
   * while the deadline leaves time; past it the call rejects with a
   * DeadlineExceededError (a timeout is never a decision). Other answers
   * reject at once with a ProblemError: InvalidRequestError (400, 413,
   * 422), UnauthorizedError, ConflictError (same ID, other content).
   */
  async submit(review: Submission, options: SubmitOptions = {}): Promise<SubmitResult> {
    const body = JSON.stringify(review);
    const deadlineAt = deadlineOf(options.deadline ?? this.#submitTimeout);
    const { status, body: out, tries } = await this.#retrying("POST", "/v1/reviews", body, {
      signal: options.signal,
      deadlineAt,
      retries: options.retries ?? Infinity,
      what: `submit ${review.review_id}`,
    });
    return { review: out as Review, created: status === 202, tries };
  }

  /**
   * Resolves with the review once it is no longer pending (`accepted`,
   * `rejected` or `manual_review`: a moderator decides it later, and a
   * webhook tells when), long-polling `GET /v1/reviews/{id}?wait=` and
   * riding out connection failures and 429/503. Rejects when the signal
   * aborts or the deadline passes (DeadlineExceededError), or with the
   * ProblemError of any other answer (NotFoundError for an unknown ID).
   */
  async waitForDecision(id: string, options: WaitOptions = {}): Promise<Review> {
    const deadlineAt = options.deadline === undefined ? Infinity : deadlineOf(options.deadline);
    const path = `${reviewPath(id)}?wait=${this.#waitSeconds}s`;
    for (;;) {
      const { body } = await this.#retrying("GET", path, undefined, {
        signal: options.signal,
        deadlineAt,
        retries: Infinity,
        waitMs: this.#waitSeconds * 1000,
        what: `wait for ${id}`,
      });
      const review = body as Review;
      if (review.state !== "pending") return review;
    }
  }

  /** Reads a review (`GET /v1/reviews/{id}`), from the ledger: the server's own writes included. */
  async get(id: string, options: CallOptions = {}): Promise<Review> {
    return (await this.#read(reviewPath(id), options, `get ${id}`)) as Review;
  }

  /** A review's stored events, in revision order (`GET /v1/reviews/{id}/events`, auditor). */
  async events(id: string, options: CallOptions = {}): Promise<ReviewEvents> {
    return (await this.#read(`${reviewPath(id)}/events`, options, `events of ${id}`)) as ReviewEvents;
  }

  /** A review's timeline (`GET /v1/reviews/{id}/timeline`, moderator or auditor). */
  async timeline(id: string, options: CallOptions = {}): Promise<Timeline> {
    return (await this.#read(`${reviewPath(id)}/timeline`, options, `timeline of ${id}`)) as Timeline;
  }

  /** Who the token signs in as (`GET /v1/me`). */
  async me(options: CallOptions = {}): Promise<Me> {
    return (await this.#read("/v1/me", options, "me")) as Me;
  }

  /** The manual queue (`GET /v1/manual-queue`, moderator): highest priority, then oldest first. */
  async listQueue(query: ManualQueueQuery = {}, options: CallOptions = {}): Promise<ManualQueue> {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== null) q.set(k, String(v));
    const qs = q.toString();
    return (await this.#read(`/v1/manual-queue${qs ? `?${qs}` : ""}`, options, "list the queue")) as ManualQueue;
  }

  /** Claims (or renews the claim on) a queue item (`POST /v1/manual-queue/{id}/claim`). */
  async claim(id: string, options: CallOptions = {}): Promise<Claim> {
    return (await this.#write("POST", `${queuePath(id)}/claim`, undefined, options, `claim ${id}`)) as Claim;
  }

  /** Releases the caller's claim (`DELETE /v1/manual-queue/{id}/claim`). */
  async release(id: string, options: CallOptions = {}): Promise<Release> {
    return (await this.#write("DELETE", `${queuePath(id)}/claim`, undefined, options, `release ${id}`)) as Release;
  }

  /**
   * Decides a review in `manual_review` (`POST /v1/reviews/{id}/decision`)
   * with the version the moderator saw: a change since answers a
   * ConflictError of kind `version-moved`. On a four-eyes class the first
   * votes leave it in `manual_review`.
   */
  async decide(id: string, decision: Decision, options: CallOptions = {}): Promise<Review> {
    return (await this.#write("POST", `${reviewPath(id)}/decision`, decision, options, `decide ${id}`)) as Review;
  }

  /** Sends a queue item back to automated review as a new round (`POST /v1/manual-queue/{id}/requeue`). */
  async requeue(id: string, request: RequeueRequest, options: CallOptions = {}): Promise<Requeued> {
    return (await this.#write("POST", `${queuePath(id)}/requeue`, request, options, `requeue ${id}`)) as Requeued;
  }

  /**
   * Requeues a page of queue items chosen by `filter` or `items`
   * (`POST /v1/manual-queue/bulk/requeue`); with `dry_run` it only counts.
   * Send `next_cursor` back as `cursor` for the next page.
   */
  async bulkRequeue(request: BulkRequest, options: CallOptions = {}): Promise<BulkResult> {
    return (await this.#write("POST", "/v1/manual-queue/bulk/requeue", request, options, "bulk requeue")) as BulkResult;
  }

  /** Releases the claims of a page of queue items (`POST /v1/manual-queue/bulk/release`). */
  async bulkRelease(request: BulkRequest, options: CallOptions = {}): Promise<BulkResult> {
    return (await this.#write("POST", "/v1/manual-queue/bulk/release", request, options, "bulk release")) as BulkResult;
  }

  /** Puts a queue item on hold (`POST /v1/manual-queue/{id}/hold`). */
  async hold(id: string, request: HoldRequest, options: CallOptions = {}): Promise<Hold> {
    return (await this.#write("POST", `${queuePath(id)}/hold`, request, options, `hold ${id}`)) as Hold;
  }

  /** Ends a hold (`DELETE /v1/manual-queue/{id}/hold`). */
  async unhold(id: string, options: CallOptions = {}): Promise<Hold> {
    return (await this.#write("DELETE", `${queuePath(id)}/hold`, undefined, options, `unhold ${id}`)) as Hold;
  }

  /**
   * The live stream of manual-queue changes (`GET /v1/manual-queue/events`,
   * moderator), as an async iterable. The token goes in the Authorization
   * header; a dropped connection is reopened with `Last-Event-ID`, so no
   * change is missed, and `lastEventId` resumes a stream of an earlier
   * process. Breaking out of the loop, `close()` or the signal ends it.
   */
  queueEvents(options: QueueStreamOptions = {}): QueueStream {
    return new QueueStream(
      { url: `${this.#base}/v1/manual-queue/events`, token: this.#token, fetch: this.#fetch },
      options,
    );
  }

  /** The wait before try n+1 (n from 1): doubled per try up to the maximum, less up to half at random, at least retryAfter. */
  backoff(n: number, retryAfterMs = 0): number {
    let d = this.#backoffInitial;
    for (let i = 1; i < n && d < this.#backoffMax; i++) d *= 2;
    d = Math.min(d, this.#backoffMax);
    d -= this.#random() * (d / 2);
    return Math.max(d, retryAfterMs);
  }

  async #read(path: string, options: CallOptions, what: string): Promise<unknown> {
    const { body } = await this.#retrying("GET", path, undefined, {
      signal: options.signal,
      deadlineAt: Infinity,
      retries: this.#retries,
      what,
    });
    return body;
  }

  /** A write other than submit: sent once, since a lost answer may hide an applied change. */
  async #write(method: string, path: string, body: unknown, options: CallOptions, what: string): Promise<unknown> {
    const res = await this.#once(method, path, body === undefined ? undefined : JSON.stringify(body), {
      signal: options.signal,
      deadlineAt: Infinity,
      waitMs: 0,
      what,
    });
    return res.body;
  }

  async #retrying(
    method: string,
    path: string,
    body: string | undefined,
    o: {
      signal: AbortSignal | undefined;
      deadlineAt: number;
      retries: number;
      what: string;
      waitMs?: number;
    },
  ): Promise<{ status: number; body: unknown; tries: number }> {
    let last: unknown;
    for (let tries = 1; ; tries++) {
      o.signal?.throwIfAborted();
      if (Date.now() >= o.deadlineAt) {
        throw new DeadlineExceededError(`${o.what}: the deadline passed after ${tries - 1} tries`, tries - 1, { cause: last });
      }
      try {
        const res = await this.#once(method, path, body, {
          signal: o.signal,
          deadlineAt: o.deadlineAt,
          waitMs: o.waitMs ?? 0,
          what: o.what,
        });
        return { ...res, tries };
      } catch (err) {
        if (err instanceof DeadlineExceededError) {
          throw new DeadlineExceededError(`${o.what}: the deadline passed during try ${tries}`, tries, { cause: last ?? err.cause });
        }
        if (!isRetryable(err) || tries > o.retries) throw err;
        last = err;
        const retryAfter = err instanceof ProblemError ? (err.retryAfterMs ?? 0) : 0;
        const wait = this.backoff(tries, retryAfter);
        if (Date.now() + wait >= o.deadlineAt) {
          throw new DeadlineExceededError(
            `${o.what}: gave up after ${tries} tries, the next would start after the deadline (${describe(err)})`,
            tries,
            { cause: err },
          );
        }
        await sleep(wait, o.signal);
      }
    }
  }

  /** One try: the answer's JSON on 2xx; a ProblemError, TransportError or DeadlineExceededError otherwise. */
  async #once(
    method: string,
    path: string,
    body: string | undefined,
    o: { signal: AbortSignal | undefined; deadlineAt: number; waitMs: number; what: string },
  ): Promise<{ status: number; body: unknown }> {
    const tryTimeout = this.#requestTimeout + o.waitMs;
    const untilDeadline = o.deadlineAt - Date.now();
    const cutByDeadline = untilDeadline <= tryTimeout;
    const timer = new AbortController();
    const t = setTimeout(() => timer.abort(), Math.max(0, Math.min(tryTimeout, untilDeadline)));
    const [signal, unlink] = o.signal ? linkSignals(o.signal, timer.signal) : [timer.signal, () => {}];
    const headers: Record<string, string> = {
      authorization: `Bearer ${this.#token}`,
      accept: "application/json, application/problem+json",
    };
    if (body !== undefined) headers["content-type"] = "application/json";
    const timedOut = (cause: unknown): ReviewledgerError =>
      cutByDeadline
        ? new DeadlineExceededError(`${o.what}: the deadline passed`, 1, { cause })
        : new TransportError(`${o.what}: no answer within ${tryTimeout} ms`, { cause });
    try {
      let res: Response;
      try {
        res = await this.#fetch(this.#base + path, { method, headers, body: body ?? null, signal });
      } catch (err) {
        if (o.signal?.aborted) throw o.signal.reason;
        if (timer.signal.aborted) throw timedOut(err);
        throw new TransportError(`${o.what}: ${describe(err)}`, { cause: err });
      }
      let text: string;
      try {
        text = await res.text();
      } catch (err) {
        if (o.signal?.aborted) throw o.signal.reason;
        if (timer.signal.aborted) throw timedOut(err);
        throw new TransportError(`${o.what}: reading the answer: ${describe(err)}`, { cause: err });
      }
      let parsed: unknown;
      try {
        parsed = text === "" ? undefined : JSON.parse(text);
      } catch {
        parsed = undefined;
      }
      if (res.status >= 200 && res.status < 300) {
        if (parsed === undefined) throw new ReviewledgerError(`${o.what}: the answer (HTTP ${res.status}) is not JSON`);
        return { status: res.status, body: parsed };
      }
      throw problemError(res.status, parsed, retryAfterMs(res.headers.get("retry-after")));
    } finally {
      clearTimeout(t);
      unlink();
    }
  }
}

/** The deadline as epoch milliseconds. */
export function deadlineOf(d: Deadline): number {
  if (d instanceof Date) return d.getTime();
  if (typeof d !== "number" || Number.isNaN(d)) throw new TypeError("deadline must be a Date or a number of milliseconds");
  return Date.now() + d;
}

/** The most of a Retry-After honoured, in ms. */
const MAX_RETRY_AFTER_MS = 60_000;

/** Reads a Retry-After of seconds or an HTTP date, in milliseconds. */
export function retryAfterMs(v: string | null): number | undefined {
  if (v === null || v.trim() === "") return undefined;
  let ms: number;
  if (/^\d+$/.test(v.trim())) ms = Number(v.trim()) * 1000;
  else {
    const at = Date.parse(v);
    if (Number.isNaN(at)) return undefined;
    ms = at - Date.now();
  }
  return Math.min(Math.max(ms, 0), MAX_RETRY_AFTER_MS);
}

/** A review ID as a path segment: as it is when it is one the server accepts (all of its characters are safe there), escaped otherwise. */
function idSegment(id: string): string {
  return /^[A-Za-z0-9._:-]+$/.test(id) ? id : encodeURIComponent(id);
}

function reviewPath(id: string): string {
  return `/v1/reviews/${idSegment(id)}`;
}

function queuePath(id: string): string {
  return `/v1/manual-queue/${idSegment(id)}`;
}

function describe(err: unknown): string {
  if (err instanceof Error) {
    const cause = err.cause instanceof Error ? `: ${err.cause.message}` : "";
    return err.message + cause;
  }
  return String(err);
}

/** A signal that aborts when either does, with its reason, and the function that unhooks it from both. */
export function linkSignals(a: AbortSignal, b: AbortSignal): [AbortSignal, () => void] {
  const c = new AbortController();
  if (a.aborted) c.abort(a.reason);
  else if (b.aborted) c.abort(b.reason);
  if (c.signal.aborted) return [c.signal, () => {}];
  const onA = () => c.abort(a.reason);
  const onB = () => c.abort(b.reason);
  a.addEventListener("abort", onA, { once: true });
  b.addEventListener("abort", onB, { once: true });
  return [
    c.signal,
    () => {
      a.removeEventListener("abort", onA);
      b.removeEventListener("abort", onB);
    },
  ];
}

/** Resolves after ms, or rejects with the signal's reason when it aborts first. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
