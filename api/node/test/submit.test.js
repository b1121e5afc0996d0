// submit against the real server: created and existing reviews, the
// review ID as idempotency key across a lost answer, what is retried
// (connection failures, 429 and 503, after their Retry-After) and what is
// not, and the deadline, which ends in an error and never in a decision.
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  ConflictError,
  DeadlineExceededError,
  InvalidRequestError,
  NotFoundError,
  ProblemError,
  TransportError,
  UnauthorizedError,
  UnavailableError,
  retryAfterMs,
} from "@reviewledger/client";
import { client, closedPort, env, hostPort, needsServer, providerCalls, submission, tcpProxy, uniqueId } from "./helpers.js";

test("submit creates a review, and again returns the same one", needsServer, async () => {
  const c = client("submitter");
  const id = uniqueId("node-submit");
  const first = await c.submit(submission(id, "node_fast"), { deadline: 10_000 });
  assert.equal(first.created, true);
  assert.equal(first.tries, 1);
  assert.equal(first.review.review_id, id);
  assert.equal(first.review.state, "pending");
  assert.equal(first.review.version, 0);
  assert.equal(first.review.decided_at, null);

  const decided = await c.waitForDecision(id, { signal: AbortSignal.timeout(30_000) });
  assert.equal(decided.state, "accepted");
  assert.equal(decided.attempts, 1);
  assert.ok(decided.decided_at);

  const again = await c.submit(submission(id, "node_fast"), { deadline: new Date(Date.now() + 10_000) });
  assert.equal(again.created, false);
  assert.deepEqual(again.review, decided);
  assert.deepEqual(await c.get(id), decided);

  const calls = await providerCalls(id);
  assert.equal(calls.length, 1);
  assert.equal(calls[0].idempotency_key, id, "the provider is called with the review ID as the key");
});

test("review IDs with every character allowed reach the server as they are", needsServer, async () => {
  const c = client("submitter");
  const id = `${uniqueId("node:ID_with.every-char")}:x`;
  const res = await c.submit(submission(id, "node_fast"));
  assert.equal(res.review.review_id, id);
  assert.equal((await c.waitForDecision(id)).review_id, id);
  assert.equal((await c.get(id)).state, "accepted");
  assert.equal((await client("auditor").events(id)).review_id, id);
  assert.equal((await client("moderator").timeline(id)).review_id, id);
});

test("problems are typed errors with type, status, field and request_id", needsServer, async () => {
  const c = client("submitter");
  const id = uniqueId("node-problem");
  await c.submit(submission(id, "node_fast"));

  const conflict = await c.submit(submission(id, "node_fast", "other content"), { deadline: 10_000 }).catch((e) => e);
  assert.ok(conflict instanceof ConflictError, String(conflict));
  assert.ok(conflict instanceof ProblemError);
  assert.equal(conflict.status, 409);
  assert.equal(conflict.type, "urn:reviewledger:problem:review-exists");
  assert.equal(conflict.kind, "review-exists");
  assert.match(conflict.request_id ?? "", /^[A-Za-z0-9._:-]+$/);

  const unknownClass = await c.submit(submission(uniqueId("node-problem"), "no_such_class")).catch((e) => e);
  assert.ok(unknownClass instanceof InvalidRequestError, String(unknownClass));
  assert.equal(unknownClass.status, 422);
  assert.equal(unknownClass.field, "content_class");

  const badId = await c.submit(submission("has/slash", "node_fast")).catch((e) => e);
  assert.ok(badId instanceof InvalidRequestError, String(badId));
  assert.equal(badId.status, 400);
  assert.equal(badId.kind, "invalid-review-id");
  assert.equal(badId.field, "review_id");
  assert.match(badId.message, /HTTP 400 .*request /);

  const unknown = await c.get(uniqueId("node-absent")).catch((e) => e);
  assert.ok(unknown instanceof NotFoundError, String(unknown));
  assert.equal(unknown.kind, "review-not-found");

  const stranger = client("submitter", { token: "not-a-token-of-this-server" });
  const unauthenticated = await stranger.submit(submission(uniqueId("node-problem"), "node_fast")).catch((e) => e);
  assert.ok(unauthenticated instanceof UnauthorizedError, String(unauthenticated));
  assert.equal(unauthenticated.status, 401);
  assert.equal(unauthenticated.kind, "unauthenticated");

  const forbidden = await c.events(id).catch((e) => e);
  assert.ok(forbidden instanceof UnauthorizedError, String(forbidden));
  assert.equal(forbidden.status, 403);
});

test("a try whose answer is lost is retried with the same review ID: the retry finds the review", needsServer, async () => {
  let requests = 0;
  // The first request reaches the server, but its answer never reaches the client.
  const proxy = await tcpProxy(hostPort(env.url), {
    onRequest(chunk, conn) {
      if (!chunk.toString("latin1").startsWith("POST ")) return "forward";
      requests++;
      if (requests === 1) conn.loseAnswer();
      return "forward";
    },
  });
  try {
    const c = client("submitter", { baseUrl: proxy.url });
    const id = uniqueId("node-lost");
    const res = await c.submit(submission(id, "node_fast"), { deadline: 15_000 });
    assert.equal(res.tries, 2);
    assert.equal(res.created, false, "the first try stored it; the second found it");
    assert.equal(res.review.review_id, id);
    const events = await client("auditor").events(id);
    assert.equal(events.events.filter((e) => e.type === "Submitted").length, 1, "one review, submitted once");
  } finally {
    await proxy.close();
  }
});

test("connection failures are retried until the deadline leaves no time, then DeadlineExceededError", async () => {
  const port = await closedPort();
  const c = client("submitter", { baseUrl: `http://127.0.0.1:${port}`, backoffInitialMs: 20, backoffMaxMs: 100 });
  const deadline = Date.now() + 1500;
  const err = await c.submit(submission("node-refused-1", "node_fast"), { deadline: new Date(deadline) }).catch((e) => e);
  assert.ok(err instanceof DeadlineExceededError, String(err));
  assert.ok(err.tries > 2, `tries ${err.tries}`);
  assert.ok(err.cause instanceof TransportError, String(err.cause));
  assert.ok(Date.now() < deadline + 2000, "it gave up at the deadline");
});

test("a try still in flight at the deadline is cut there: DeadlineExceededError, not a decision", async () => {
  const net = await import("node:net");
  const sockets = [];
  const silent = net.createServer((s) => void sockets.push(s)); // accepts, never answers
  await new Promise((resolve) => silent.listen(0, "127.0.0.1", () => resolve(undefined)));
  try {
    const { port } = /** @type {import("node:net").AddressInfo} */ (silent.address());
    const c = client("submitter", { baseUrl: `http://127.0.0.1:${port}` });
    const deadline = Date.now() + 1000;
    const err = await c.submit(submission("node-silent-1", "node_fast"), { deadline: new Date(deadline) }).catch((e) => e);
    assert.ok(err instanceof DeadlineExceededError, String(err));
    assert.equal(err.tries, 1);
    assert.ok(Date.now() >= deadline - 5, "not before the deadline");
    assert.ok(Date.now() < deadline + 2000, "at the deadline");
    assert.equal(sockets.length, 1, "one try");
  } finally {
    for (const s of sockets) s.destroy();
    await new Promise((resolve) => silent.close(() => resolve(undefined)));
  }

  const past = await client("submitter").submit(submission("node-past-1", "node_fast"), { deadline: new Date(Date.now() - 1) }).catch((e) => e);
  assert.ok(past instanceof DeadlineExceededError, String(past));
  assert.equal(past.tries, 0, "a deadline already past sends nothing");
});

test("the signal abandons a submit between tries", async () => {
  const port = await closedPort();
  const c = client("submitter", { baseUrl: `http://127.0.0.1:${port}` });
  const ctl = new AbortController();
  setTimeout(() => ctl.abort(new Error("the caller gave up")), 300);
  const err = await c.submit(submission("node-abort-1", "node_fast"), { signal: ctl.signal, deadline: 30_000 }).catch((e) => e);
  assert.equal(err.message, "the caller gave up");
});

/**
 * A stub of the server answering the first n submits with status (and
 * Retry-After), then passing requests to the real server. Records when
 * each request arrived.
 */
async function stubbedServer(n, status, retryAfter) {
  const arrivals = [];
  const proxy = await tcpProxy(hostPort(env.url), {
    onRequest(chunk, { socket }) {
      if (!chunk.toString("latin1").startsWith("POST ")) return "forward";
      arrivals.push(Date.now());
      if (arrivals.length > n) return "forward";
      const body = JSON.stringify({ type: "urn:reviewledger:problem:unavailable", title: "Unavailable", status });
      const ra = retryAfter === undefined ? "" : `retry-after: ${retryAfter}\r\n`;
      socket.end(
        `HTTP/1.1 ${status} X\r\ncontent-type: application/problem+json\r\n${ra}content-length: ${body.length}\r\nconnection: close\r\n\r\n${body}`,
      );
      return "drop";
    },
  });
  return { proxy, arrivals };
}

test("429 and 503 are retried, never sooner than their Retry-After", needsServer, async () => {
  for (const status of [429, 503]) {
    const { proxy, arrivals } = await stubbedServer(1, status, "1");
    try {
      const id = uniqueId(`node-retry-after-${status}`);
      const res = await client("submitter", { baseUrl: proxy.url }).submit(submission(id, "node_fast"), { deadline: 10_000 });
      assert.equal(res.created, true);
      assert.equal(res.tries, 2);
      assert.equal(arrivals.length, 2);
      assert.ok(arrivals[1] - arrivals[0] >= 990, `retried after ${arrivals[1] - arrivals[0]} ms, Retry-After was 1 s`);
    } finally {
      await proxy.close();
    }
  }
});

test("a bounded retry counter: past its retries submit throws the last failure", needsServer, async () => {
  const { proxy, arrivals } = await stubbedServer(10, 503, "0");
  try {
    const err = await client("submitter", { baseUrl: proxy.url })
      .submit(submission(uniqueId("node-retries"), "node_fast"), { deadline: 10_000, retries: 2 })
      .catch((e) => e);
    assert.ok(err instanceof UnavailableError, String(err));
    assert.equal(err.status, 503);
    assert.equal(arrivals.length, 3, "one try and two retries");
  } finally {
    await proxy.close();
  }
});

test("a Retry-After past the deadline gives up at once, with the 429 as the cause", needsServer, async () => {
  const { proxy, arrivals } = await stubbedServer(10, 429, "30");
  try {
    const err = await client("submitter", { baseUrl: proxy.url })
      .submit(submission(uniqueId("node-retry-late"), "node_fast"), { deadline: 5_000 })
      .catch((e) => e);
    assert.ok(err instanceof DeadlineExceededError, String(err));
    assert.equal(err.tries, 1);
    assert.ok(err.cause instanceof UnavailableError);
    assert.equal(err.cause.status, 429);
    assert.equal(err.cause.retryAfterMs, 30_000);
    assert.equal(arrivals.length, 1);
  } finally {
    await proxy.close();
  }
});

test("other failures are not retried: 500 and 502 are errors at once", needsServer, async () => {
  for (const status of [500, 502]) {
    const { proxy, arrivals } = await stubbedServer(10, status);
    try {
      const err = await client("submitter", { baseUrl: proxy.url })
        .submit(submission(uniqueId(`node-no-retry-${status}`), "node_fast"), { deadline: 5_000 })
        .catch((e) => e);
      assert.ok(err instanceof ProblemError, String(err));
      assert.ok(!(err instanceof UnavailableError));
      assert.equal(err.status, status);
      assert.equal(arrivals.length, 1);
    } finally {
      await proxy.close();
    }
  }
});

test("backoff doubles up to its maximum, with jitter, and never under Retry-After", () => {
  const lowest = client("submitter", { backoffInitialMs: 100, backoffMaxMs: 1000, random: () => 0.999999 });
  const highest = client("submitter", { backoffInitialMs: 100, backoffMaxMs: 1000, random: () => 0 });
  assert.deepEqual([1, 2, 3, 4, 5, 9].map((n) => highest.backoff(n)), [100, 200, 400, 800, 1000, 1000]);
  for (const [n, full] of [[1, 100], [3, 400], [9, 1000]]) {
    const d = lowest.backoff(n);
    assert.ok(d > full / 2 - 1 && d <= full, `try ${n}: ${d}`);
  }
  assert.equal(highest.backoff(1, 5000), 5000);
});

test("Retry-After is read as seconds or an HTTP date, at most a minute", () => {
  assert.equal(retryAfterMs("2"), 2000);
  assert.equal(retryAfterMs(" 0 "), 0);
  const inTen = retryAfterMs(new Date(Date.now() + 10_000).toUTCString()) ?? -1;
  assert.ok(inTen > 8000 && inTen <= 10_000, String(inTen));
  assert.equal(retryAfterMs(new Date(Date.now() - 10_000).toUTCString()), 0, "a date past is now");
  assert.equal(retryAfterMs("3600"), 60_000);
  assert.equal(retryAfterMs("soon"), undefined);
  assert.equal(retryAfterMs(null), undefined);
});
