// A provider outage as the platform meets it: the server with an
// admission ceiling of one review in flight holds a review whose provider
// never answers, so a second submit is answered 429 with Retry-After. The
// client retries it while its deadline leaves time and then gives up with
// a DeadlineExceededError: no decision, and nothing stored. Once the held
// review leaves the automated path (manual_review after its attempts), the
// same submit goes through and is decided.
import assert from "node:assert/strict";
import { test } from "node:test";
import { DeadlineExceededError, NotFoundError, UnavailableError } from "@reviewledger/client";
import { client, env, needsServer, script, submission, uniqueId } from "./helpers.js";

test("during a provider outage submit gives up at its deadline, and succeeds once the outage is over", needsServer, async () => {
  const c = client("submitter", { baseUrl: env.admissionUrl });
  const held = uniqueId("node-outage-held");
  await script(held, "hang");
  const first = await c.submit(submission(held, "node_outage"), { deadline: 10_000 });
  assert.equal(first.created, true);

  const late = uniqueId("node-outage-late");
  const deadline = Date.now() + 3000;
  const err = await c.submit(submission(late, "node_outage"), { deadline: new Date(deadline) }).catch((e) => e);
  assert.ok(err instanceof DeadlineExceededError, String(err));
  assert.ok(err.tries >= 2, `tries ${err.tries}: the 429s were retried`);
  assert.ok(err.cause instanceof UnavailableError, String(err.cause));
  assert.equal(err.cause.status, 429);
  assert.equal(err.cause.kind, "overloaded");
  assert.ok(err.cause.retryAfterMs > 0, "the server said when to come back");
  assert.ok(Date.now() < deadline + 2000, "it gave up at the deadline");
  const absent = await c.get(late).catch((e) => e);
  assert.ok(absent instanceof NotFoundError, "a timeout is never a decision: nothing was stored");

  // The held review uses up its attempts and waits for a moderator.
  const escalated = await c.waitForDecision(held, { signal: AbortSignal.timeout(30_000) });
  assert.equal(escalated.state, "manual_review");
  assert.equal(escalated.attempts, 2);

  const ok = await c.submit(submission(late, "node_outage"), { deadline: 15_000 });
  assert.equal(ok.created, true);
  const decided = await c.waitForDecision(late, { signal: AbortSignal.timeout(30_000) });
  assert.equal(decided.state, "accepted");
});
