// The live queue stream: changes as they happen, a dropped connection
// reopened with Last-Event-ID (nothing missed), a stream resumed from a
// position in a new process, and its refusals; and the event-stream
// parser on its own.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Client, InvalidRequestError, UnauthorizedError, parseEventStream } from "@reviewledger/client";
import { client, env, hostPort, needsServer, submission, tcpProxy, uniqueId } from "./helpers.js";

/**
 * Reads the iterator until an event of the type (for the review, when
 * given) arrives, and returns it with the ones skipped.
 * @param {AsyncIterator<import("@reviewledger/client").QueueStreamEvent>} it
 */
async function next(it, event, reviewId) {
  const skipped = [];
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no ${event} of ${reviewId} within 30 s (saw ${skipped.map((e) => e.event)})`)), 30_000);
  });
  try {
    for (;;) {
      const r = await Promise.race([it.next(), timeout]);
      if (r.done) throw new Error(`the stream ended before a ${event} of ${reviewId}`);
      const ev = r.value;
      if (ev.event === event && (reviewId === undefined || ev.data.review_id === reviewId)) return { ev, skipped };
      skipped.push(ev);
    }
  } finally {
    clearTimeout(timer);
  }
}

test("the queue stream resumes with Last-Event-ID after its connection drops, missing nothing", needsServer, async () => {
  const proxy = await tcpProxy(hostPort(env.url));
  const stream = client("moderator", { baseUrl: proxy.url }).queueEvents({ reconnectDelayMs: 100 });
  const it = stream[Symbol.asyncIterator]();
  try {
    await next(it, "ready");
    const id = uniqueId("node-stream");
    await client("submitter").submit(submission(id, "node_gate"));
    const { ev: added } = await next(it, "added", id);
    assert.equal(added.data.item?.review_id, id);
    assert.ok(added.id);

    const mona = client("moderator");
    await mona.claim(id);
    const { ev: claimed } = await next(it, "claimed", id);
    assert.equal(claimed.data.claimed_by, "mona");

    // The connection drops, and new ones are refused, while the queue changes.
    proxy.cut(true);
    await mona.release(id);
    await mona.hold(id, { note: "while the stream was away" });
    proxy.allow();

    const { ev: released } = await next(it, "released", id);
    assert.equal(released.data.released_by, "mona");
    const { ev: held } = await next(it, "held", id);
    assert.equal(held.data.held_by, "mona");
    assert.ok(stream.reconnects >= 1, `reconnects ${stream.reconnects}`);
    assert.equal(stream.lastEventId, held.id);

    // A new stream resumed from the claim gets what followed it, in order.
    const later = mona.queueEvents({ lastEventId: claimed.id, reconnect: false });
    const lit = later[Symbol.asyncIterator]();
    const { ev: again, skipped } = await next(lit, "held", id);
    assert.equal(again.id, held.id);
    assert.deepEqual(
      skipped.filter((e) => e.data.review_id === id).map((e) => e.event),
      ["released"],
    );
    later.close();
    assert.equal((await lit.next()).done, true, "close ends the iteration");
  } finally {
    stream.close();
    await proxy.close();
  }
});

test("the queue stream refuses an unknown token and a malformed Last-Event-ID", needsServer, async () => {
  const stranger = client("moderator", { token: "not-a-token-of-this-server" }).queueEvents();
  const unauthorized = await stranger[Symbol.asyncIterator]().next().catch((e) => e);
  assert.ok(unauthorized instanceof UnauthorizedError, String(unauthorized));
  assert.equal(unauthorized.status, 401);

  const bad = client("moderator").queueEvents({ lastEventId: "not a position" });
  const invalid = await bad[Symbol.asyncIterator]().next().catch((e) => e);
  assert.ok(invalid instanceof InvalidRequestError, String(invalid));
  assert.equal(invalid.field, "Last-Event-ID");

  const submitter = client("submitter").queueEvents();
  const forbidden = await submitter[Symbol.asyncIterator]().next().catch((e) => e);
  assert.ok(forbidden instanceof UnauthorizedError, String(forbidden));
  assert.equal(forbidden.status, 403);
});

test("close ends the iteration even with events already read from the connection", async () => {
  // One chunk carries three events: the first is handed out, then close()
  // is called; the two the parser still holds must not follow it.
  const chunk =
    'id: 1-1\nevent: released\ndata: {"type":"released","review_id":"a"}\n\n' +
    'id: 2-2\nevent: held\ndata: {"type":"held","review_id":"a"}\n\n' +
    'event: ready\ndata: {"position":"2-2"}\n\n';
  const fetch = async () =>
    new Response(
      new ReadableStream({
        start(ctl) {
          ctl.enqueue(new TextEncoder().encode(chunk));
        },
      }),
      { status: 200, headers: { "content-type": "text/event-stream" } },
    );
  const stream = new Client({ baseUrl: "http://127.0.0.1:1", token: "t".repeat(16), fetch }).queueEvents({ reconnect: false });
  const it = stream[Symbol.asyncIterator]();
  const first = await it.next();
  assert.equal(first.value?.event, "released");
  stream.close();
  assert.deepEqual(await it.next(), { done: true, value: undefined });
});

test("the event-stream parser follows the format: line ends, comments, multi-line data, id and retry", async () => {
  const chunks = [
    "\uFEFFretry: 2000\r\n\r\nevent: ready\r",
    "\ndata: {\"position\":\"1-1\"}\n\n: heartbeat\n\n",
    "id: 5-5\nevent: claimed\ndata: {\"a\":\ndata:1}\n\n",
    "event: held\rdata: x\r\rid\n",
    "data: after an empty id\n\n",
    "data: unterminated",
  ];
  const body = new ReadableStream({
    start(ctl) {
      for (const c of chunks) ctl.enqueue(new TextEncoder().encode(c));
      ctl.close();
    },
  });
  const got = [];
  for await (const ev of parseEventStream(body)) got.push(ev);
  assert.deepEqual(got, [
    { retry: 2000 },
    { event: "ready", data: '{"position":"1-1"}' },
    { id: "5-5", event: "claimed", data: '{"a":\n1}' },
    { id: "5-5", event: "held", data: "x" },
    { id: "", data: "after an empty id" },
  ]);
});
