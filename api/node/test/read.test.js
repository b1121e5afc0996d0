// waitForDecision over the long-poll, get, events and timeline.
import assert from "node:assert/strict";
import { test } from "node:test";
import { DeadlineExceededError, NotFoundError } from "@reviewledger/client";
import { client, needsServer, script, submission, uniqueId } from "./helpers.js";

test("waitForDecision long-polls until the review leaves pending", needsServer, async () => {
  const c = client("submitter", { waitSeconds: 1 });
  const id = uniqueId("node-wait");
  // Two hanging attempts of 1 s, then a finding: several long-polls of 1 s.
  await script(id, "hang", "hang", "reject");
  await c.submit(submission(id, "node_fast"));
  const r = await c.waitForDecision(id, { signal: AbortSignal.timeout(30_000) });
  assert.equal(r.state, "rejected");
  assert.equal(r.attempts, 3);
  assert.deepEqual(r.reasons, ["not allowed"]);
});

test("waitForDecision answers manual_review: a moderator decides later", needsServer, async () => {
  const c = client("submitter");
  const id = uniqueId("node-wait-manual");
  await script(id, "hang");
  await c.submit(submission(id, "node_fast"));
  const r = await c.waitForDecision(id);
  assert.equal(r.state, "manual_review");
  assert.equal(r.decided_at, null);
});

test("waitForDecision ends with its signal or its deadline, never with a decision", needsServer, async () => {
  const c = client("submitter", { waitSeconds: 1 });
  const id = uniqueId("node-wait-cut");
  await script(id, "hang");
  await c.submit(submission(id, "node_fast"));

  const aborted = await c.waitForDecision(id, { signal: AbortSignal.timeout(300) }).catch((e) => e);
  assert.equal(aborted.name, "TimeoutError", String(aborted));

  const expired = await c.waitForDecision(id, { deadline: 300 }).catch((e) => e);
  assert.ok(expired instanceof DeadlineExceededError, String(expired));

  const unknown = await c.waitForDecision(uniqueId("node-wait-absent")).catch((e) => e);
  assert.ok(unknown instanceof NotFoundError, String(unknown));
});

test("events and timeline tell the review's history", needsServer, async () => {
  const id = uniqueId("node-history");
  await script(id, "status:503", "accept");
  const s = client("submitter");
  await s.submit(submission(id, "node_fast"));
  const decided = await s.waitForDecision(id, { signal: AbortSignal.timeout(30_000) });
  assert.equal(decided.state, "accepted");

  const events = await client("auditor").events(id);
  assert.equal(events.review_id, id);
  const types = events.events.map((e) => e.type);
  assert.equal(types[0], "Submitted");
  assert.equal(types.at(-1), "FindingReceived");
  assert.equal(types.filter((t) => t === "AttemptStarted").length, 2, types.join(" "));
  assert.deepEqual(events.events.map((e) => e.version), events.events.map((_, i) => i));

  for (const role of /** @type {const} */ (["moderator", "auditor"])) {
    const tl = await client(role).timeline(id);
    assert.equal(tl.review_id, id);
    assert.equal(tl.state, "accepted");
    assert.equal(tl.round, 1);
    const attempts = tl.entries.filter((e) => e.kind === "attempt");
    assert.deepEqual(attempts.map((e) => e.outcome), ["failed", "finding"]);
    assert.equal(tl.entries[0].kind, "submitted");
    assert.equal(tl.entries[0].actor, "sam");
  }

  assert.deepEqual(await client("moderator").me(), { name: "mona", role: "moderator" });
});
