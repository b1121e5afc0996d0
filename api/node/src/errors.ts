import type { components } from "./generated/openapi.js";

/** An RFC 9457 problem body as reviewledger sends it (schema `Problem`). */
export type Problem = components["schemas"]["Problem"];

/** The prefix of every problem type reviewledger sends. */
export const PROBLEM_TYPE_PREFIX = "urn:reviewledger:problem:";

/** The base class of every error this package throws. */
export class ReviewledgerError extends Error {
  override name = "ReviewledgerError";
}

/**
 * An answer that is not a success: the server's problem+json body, with
 * its members as they were sent (`type`, `status`, `field`,
 * `request_id`, ...). Subclasses tell the kinds apart with `instanceof`.
 */
export class ProblemError extends ReviewledgerError implements Problem {
  override name = "ProblemError";
  /** The problem type, e.g. `urn:reviewledger:problem:review-not-found`. */
  readonly type: string;
  readonly title: string;
  /** The HTTP status. */
  readonly status: number;
  readonly detail?: string;
  readonly instance?: string;
  /** The request field at fault, when there is one. */
  readonly field?: string;
  /** The request's ID (also the X-Request-Id header): quote it when reporting a 500. */
  readonly request_id?: string;
  /** On `claimed-by-other`: the moderator holding the live claim. */
  readonly claimed_by?: string;
  /** The server's Retry-After, in milliseconds, when it sent one. */
  readonly retryAfterMs?: number;

  constructor(problem: Problem, retryAfterMs?: number) {
    super(problemMessage(problem));
    this.type = problem.type;
    this.title = problem.title;
    this.status = problem.status;
    if (problem.detail !== undefined) this.detail = problem.detail;
    if (problem.instance !== undefined) this.instance = problem.instance;
    if (problem.field !== undefined) this.field = problem.field;
    if (problem.request_id !== undefined) this.request_id = problem.request_id;
    if (problem.claimed_by !== undefined) this.claimed_by = problem.claimed_by;
    if (retryAfterMs !== undefined) this.retryAfterMs = retryAfterMs;
  }

  /** The type without its `urn:reviewledger:problem:` prefix, e.g. `version-moved`. */
  get kind(): string {
    return this.type.startsWith(PROBLEM_TYPE_PREFIX) ? this.type.slice(PROBLEM_TYPE_PREFIX.length) : this.type;
  }
}

/** 400, 413 or 422: the request was refused as it stands; `field` names the member at fault. */
export class InvalidRequestError extends ProblemError {
  override name = "InvalidRequestError";
}
/** 401 or 403: the token is missing or unknown, or its role may not do this. */
export class UnauthorizedError extends ProblemError {
  override name = "UnauthorizedError";
}
/** 404: no such review (or route, or delivery). */
export class NotFoundError extends ProblemError {
  override name = "NotFoundError";
}
/** 409: the review exists with other content, moved on, or is claimed by another moderator. */
export class ConflictError extends ProblemError {
  override name = "ConflictError";
}
/** 429 or 503: reviewledger could not take the request now; `retryAfterMs` says when to try again. */
export class UnavailableError extends ProblemError {
  override name = "UnavailableError";
}

/** The error for a non-2xx answer: its problem body, or one made from the status. */
export function problemError(status: number, body: unknown, retryAfterMs?: number): ProblemError {
  const p: Problem =
    isProblem(body) ? { ...body, status } : { type: "about:blank", title: `HTTP ${status}`, status };
  const Kind =
    status === 400 || status === 413 || status === 422
      ? InvalidRequestError
      : status === 401 || status === 403
        ? UnauthorizedError
        : status === 404
          ? NotFoundError
          : status === 409
            ? ConflictError
            : status === 429 || status === 503
              ? UnavailableError
              : ProblemError;
  return new Kind(p, retryAfterMs);
}

function isProblem(v: unknown): v is Problem {
  return typeof v === "object" && v !== null && typeof (v as Problem).type === "string" && typeof (v as Problem).title === "string";
}

function problemMessage(p: Problem): string {
  let msg = `reviewledger: HTTP ${p.status} ${p.title}`;
  if (p.detail) msg += `: ${p.detail}`;
  if (p.request_id) msg += ` (request ${p.request_id})`;
  return msg;
}

/**
 * The request could not be sent or its answer not read (connection
 * refused or reset, DNS, a try that outlasted its own timeout). `cause`
 * is the underlying error.
 */
export class TransportError extends ReviewledgerError {
  override name = "TransportError";
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/**
 * `submit` (or another call with a deadline) gave up because its deadline
 * passed or left no time for another try. It is never a decision: the
 * review may or may not have been stored by a try whose answer was lost,
 * and submitting the same review again is safe (the review ID is the
 * idempotency key). `cause` is the last try's failure, when there was one.
 */
export class DeadlineExceededError extends ReviewledgerError {
  override name = "DeadlineExceededError";
  /** How many requests were sent. */
  readonly tries: number;
  constructor(message: string, tries: number, options?: { cause?: unknown }) {
    super(message, options);
    this.tries = tries;
  }
}

/** A decision webhook whose Standard Webhooks headers are missing, do not verify, or are out of tolerance. */
export class WebhookVerificationError extends ReviewledgerError {
  override name = "WebhookVerificationError";
}
