// The moderators' side: the queue, claims, holds, a requeue, decisions
// with the expected version, and bulk requeues with a dry run.
import assert from "node:assert/strict";
import { test } from "node:test";
import { ConflictError } from "@reviewledger/client";
import { client, eventually, needsServer, script, submission, uniqueId } from "./helpers.js";

/** Submits a review of a human-gated class and returns its queue item once listed. */
async function queued(id, contentClass, ...steps) {
  if (steps.length) await script(id, ...steps);
  const s = client("submitter");
  await s.submit(submission(id, contentClass));
  const r = await s.waitForDecision(id, { signal: AbortSignal.timeout(30_000) });
  assert.equal(r.state, "manual_review");
  const mod = client("moderator");
  return eventually(`${id} in the queue`, async () =>
    (await mod.listQueue({ content_class: contentClass, limit: 1000 })).items.find((i) => i.review_id === id),
  );
}

test("claim, release, hold, requeue and decide with the expected version", needsServer, async () => {
  const mona = client("moderator");
  const max = client("moderator2");
  const id = uniqueId("node-moderate");
  // Round 1 accepted by the provider (the class is human-gated); round 2 times out.
  const item = await queued(id, "node_gate", "accept", "hang");
  assert.equal(item.round, 1);

  const claim = await mona.claim(id);
  assert.equal(claim.review_id, id);
  assert.equal(claim.claimed_by, "mona");
  assert.ok(claim.claim_expires_at);
  const taken = await max.claim(id).catch((e) => e);
  assert.ok(taken instanceof ConflictError, String(taken));
  assert.equal(taken.kind, "claimed-by-other");
  assert.equal(taken.claimed_by, "mona");

  const release = await mona.release(id);
  assert.equal(release.released_by, "mona");
  assert.equal(release.claimed_by, "mona");
  const again = await mona.release(id).catch((e) => e);
  assert.ok(again instanceof ConflictError, String(again));
  assert.equal(again.kind, "not-claimed");

  const hold = await mona.hold(id, { note: "waiting for legal" });
  assert.equal(hold.held, true);
  assert.equal(hold.held_by, "mona");
  const unhold = await mona.unhold(id);
  assert.equal(unhold.held, false);

  const requeued = await mona.requeue(id, { expected_version: item.version, note: "provider back" });
  assert.equal(requeued.state, "pending");
  assert.equal(requeued.round, 2);
  const round2 = await client("submitter").waitForDecision(id, { signal: AbortSignal.timeout(30_000) });
  assert.equal(round2.state, "manual_review");

  const stale = await mona.decide(id, { state: "accepted", expected_version: item.version }).catch((e) => e);
  assert.ok(stale instanceof ConflictError, String(stale));
  assert.equal(stale.kind, "version-moved");

  const decided = await mona.decide(id, { state: "accepted", note: "fine after all", expected_version: round2.version });
  assert.equal(decided.state, "accepted");
  assert.ok(decided.decided_at);
  const late = await max.decide(id, { state: "rejected", expected_version: decided.version }).catch((e) => e);
  assert.ok(late instanceof ConflictError, String(late));
  assert.equal(late.kind, "not-in-manual-review");

  const kinds = (await mona.timeline(id)).entries.map((e) => e.kind);
  for (const k of ["claimed", "released", "held", "unheld", "requeued", "decided"]) assert.ok(kinds.includes(k), `${k} in ${kinds}`);
});

test("bulk requeue: a dry run counts and changes nothing, then the items are requeued", needsServer, async () => {
  const mona = client("moderator");
  const ids = [uniqueId("node-bulk"), uniqueId("node-bulk"), uniqueId("node-bulk")];
  const items = [];
  for (const id of ids) items.push(await queued(id, "node_bulk"));

  const dry = await mona.bulkRequeue({ filter: { content_class: "node_bulk" }, dry_run: true });
  assert.equal(dry.dry_run, true);
  assert.equal(dry.total, 3);
  assert.deepEqual(dry.items, [], "a dry run lists no outcomes, only the count");
  for (const id of ids) assert.equal((await mona.get(id)).state, "manual_review", "a dry run changes nothing");

  const done = await mona.bulkRequeue({
    items: items.map((i) => ({ review_id: i.review_id, expected_version: i.version })),
    note: "provider back",
  });
  assert.equal(done.dry_run, false);
  assert.equal(done.counts.requeued, 3);
  assert.equal(done.next_cursor, null);
  for (const r of done.items) assert.equal(r.outcome, "requeued");

  for (const id of ids) {
    await eventually(`${id} in round 2`, async () => {
      const tl = await mona.timeline(id);
      return tl.round === 2 && tl.state === "manual_review";
    });
  }
  const moved = await mona.bulkRequeue({ items: [{ review_id: ids[0], expected_version: items[0].version }] });
  assert.equal(moved.items[0].outcome, "conflict", JSON.stringify(moved.items[0]));

  const release = await mona.bulkRelease({ items: ids.map((review_id) => ({ review_id })) });
  for (const r of release.items) assert.equal(r.outcome, "not_claimed");
});
