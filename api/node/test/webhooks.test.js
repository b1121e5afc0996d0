// Decision webhooks: verifyWebhook against what the Standard Webhooks
// reference library signs, the node:http handler's answers, and the
// handler receiving the real server's webhooks while it fails, then
// recovers, then gets a redelivery it drops.
import assert from "node:assert/strict";
import http from "node:http";
import { test } from "node:test";
import { Webhook } from "standardwebhooks";
import { MemorySeenStore, WebhookVerificationError, createWebhookHandler, verifyWebhook } from "@reviewledger/client";
import { client, env, eventually, needsServer, submission, uniqueId } from "./helpers.js";

const secret = "whsec_" + Buffer.from("a test secret of 32 bytes or so!").toString("base64");

/** A webhook body and its headers, signed by the reference library at time at. */
function signed(body, { id = "msg_1", at = new Date(), key = secret } = {}) {
  const raw = JSON.stringify(body);
  const signature = new Webhook(key).sign(id, at, raw);
  return { raw, headers: { "webhook-id": id, "webhook-timestamp": String(Math.floor(at.getTime() / 1000)), "webhook-signature": signature } };
}

const body = {
  type: "review.decided",
  timestamp: "2026-12-01T10:35:00.627Z",
  data: { review_id: "r1", state: "accepted", content_class: "c", attempts: 1, version: 2, submitted_at: "2026-12-01T10:34:59Z", deadline: "2026-12-01T10:35:09Z", decided_at: "2026-12-01T10:35:00Z", reasons: [] },
};

test("verifyWebhook accepts what the reference library signs, and refuses anything else", () => {
  const { raw, headers } = signed(body);
  const ev = verifyWebhook(raw, headers, secret);
  assert.deepEqual(ev, { id: "msg_1", type: "review.decided", timestamp: body.timestamp, review: body.data });
  assert.deepEqual(verifyWebhook(Buffer.from(raw), new Headers(headers), secret), ev, "a Buffer and fetch's Headers");
  assert.deepEqual(verifyWebhook(raw, headers, secret.slice("whsec_".length)), ev, "the secret without its prefix");
  const rotated = { ...headers, "webhook-signature": `v1,${Buffer.alloc(32).toString("base64")} v2,x ${headers["webhook-signature"]}` };
  assert.deepEqual(verifyWebhook(raw, rotated, secret), ev, "one of several signatures");

  const refusals = [
    [raw.replace("accepted", "rejected"), headers, /does not verify/],
    [raw, { ...headers, "webhook-id": "msg_2" }, /does not verify/],
    [raw, { ...headers, "webhook-signature": undefined }, /missing webhook-signature/],
    [raw, { ...headers, "webhook-timestamp": "soon" }, /not a Unix time/],
    [raw, signed(body, { at: new Date(Date.now() - 301_000) }).headers, /more than 300 s off/],
    [raw, signed(body, { at: new Date(Date.now() + 301_000) }).headers, /more than 300 s off/],
    [raw, signed(body, { key: "whsec_" + Buffer.from("another secret, 32 bytes long!!!").toString("base64") }).headers, /does not verify/],
  ];
  for (const [r, h, msg] of refusals) {
    assert.throws(() => verifyWebhook(r, h, secret), (err) => err instanceof WebhookVerificationError && msg.test(err.message));
  }
  assert.throws(() => verifyWebhook(raw, headers, "whsec_!!"), TypeError);
});

/** Serves handler on addr (a free port when not given), recording each answer's status by webhook-id. */
async function serve(handler, addr) {
  const answers = [];
  const server = http.createServer((req, res) => {
    res.on("finish", () => answers.push({ id: String(req.headers["webhook-id"]), status: res.statusCode }));
    handler(req, res);
  });
  const [host, port] = (addr ?? "127.0.0.1:0").split(":");
  await new Promise((resolve) => server.listen(Number(port), host, resolve));
  const { port: p } = /** @type {import("node:net").AddressInfo} */ (server.address());
  return {
    url: `http://${host}:${p}/webhooks`,
    answers,
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}

test("the handler answers as the notifier expects: 204, 200 for a redelivery, 503 while handling, 500, 401, 405, 413", async () => {
  let release;
  const gate = new Promise((resolve) => (release = resolve));
  let entered;
  const handling = new Promise((resolve) => (entered = resolve));
  const handled = [];
  const handler = createWebhookHandler({
    secret,
    maxBodyBytes: 4096,
    async onEvent(ev) {
      if (ev.review.review_id === "fails") throw new Error("the platform's database is down");
      entered();
      await gate;
      handled.push(ev.id);
    },
  });
  const srv = await serve(handler);
  const post = (raw, headers) => fetch(srv.url, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: raw });
  try {
    const { raw, headers } = signed(body, { id: "msg_busy" });
    const first = post(raw, headers);
    await handling; // the first delivery is in onEvent
    const second = await post(raw, headers);
    assert.equal(second.status, 503);
    assert.equal(second.headers.get("retry-after"), "1");
    release();
    assert.equal((await first).status, 204);
    assert.equal((await post(raw, headers)).status, 200, "a redelivery is answered 200");
    assert.deepEqual(handled, ["msg_busy"], "handled once");

    const failing = signed({ ...body, data: { ...body.data, review_id: "fails" } }, { id: "msg_fails" });
    assert.equal((await post(failing.raw, failing.headers)).status, 500);
    assert.equal((await post(raw.replace("accepted", "rejected"), headers)).status, 401);
    assert.equal((await fetch(srv.url)).status, 405);
    const big = signed({ ...body, pad: "x".repeat(5000) }, { id: "msg_big" });
    assert.equal((await post(big.raw, big.headers)).status, 413);
  } finally {
    await srv.close();
  }
});

test("replicas sharing a SeenStore handle a webhook once between them; a MemorySeenStore forgets after its TTL", async () => {
  const ids = new Set();
  /** @type {import("@reviewledger/client").SeenStore} */
  const shared = { has: async (id) => ids.has(id), add: async (id) => void ids.add(id) };
  const handled = [];
  const replicas = await Promise.all(
    [1, 2].map((n) => serve(createWebhookHandler({ secret, seen: shared, onEvent: (ev) => void handled.push(`${n}:${ev.id}`) }))),
  );
  try {
    const { raw, headers } = signed(body, { id: "msg_shared" });
    const post = (url) => fetch(url, { method: "POST", headers, body: raw });
    assert.equal((await post(replicas[0].url)).status, 204);
    assert.equal((await post(replicas[1].url)).status, 200, "the other replica knows it was handled");
    assert.deepEqual(handled, ["1:msg_shared"]);
  } finally {
    await Promise.all(replicas.map((r) => r.close()));
  }

  let now = 1_000_000;
  const store = new MemorySeenStore(50, () => now);
  store.add("a");
  assert.equal(store.has("a"), true);
  assert.equal(store.has("b"), false);
  now += 49;
  assert.equal(store.has("a"), true);
  now += 1;
  assert.equal(store.has("a"), false, "forgotten after the TTL");
  store.add("b"); // and dropped from memory
  assert.equal(store.has("a"), false);
});

test("the handler receives the server's webhooks: down, then failing, it recovers, and drops a redelivery", needsServer, async () => {
  const admin = { authorization: `Bearer ${env.tokens.admin}` };
  const s = client("submitter");
  // Decided while the receiver is down: the server retries its webhook.
  const early = uniqueId("node-webhook-early");
  await s.submit(submission(early, "node_fast"));
  await s.waitForDecision(early, { signal: AbortSignal.timeout(30_000) });
  await eventually("the early webhook failing", async () => {
    const l = await (await fetch(`${env.url}/v1/admin/deliveries?state=failing&review_id=${early}`, { headers: admin })).json();
    return l.deliveries.length === 1 && /refused/.test(l.deliveries[0].last_error ?? "");
  });

  const id = uniqueId("node-webhook");
  let failures = 0;
  /** @type {import("@reviewledger/client").WebhookEvent[]} */
  const handled = [];
  const handler = createWebhookHandler({
    secret: env.notifySecret,
    onEvent(ev) {
      if (ev.review.review_id === early) handled.push(ev);
      if (ev.review.review_id !== id) return; // other tests' reviews
      if (failures < 3) {
        failures++;
        throw new Error("not yet");
      }
      handled.push(ev);
    },
  });
  const srv = await serve(handler, env.notifyAddr);
  try {
    await eventually("the early webhook delivered once the receiver is up", () => handled.some((e) => e.review.review_id === early), 60_000);
    handled.length = 0;
    await s.submit(submission(id, "node_fast"));
    const decided = await s.waitForDecision(id, { signal: AbortSignal.timeout(30_000) });
    await eventually("the decision webhook handled", () => handled.length === 1, 60_000);
    assert.equal(failures, 3);
    const [ev] = handled;
    assert.equal(ev.type, "review.decided");
    assert.deepEqual(ev.review, decided);
    assert.deepEqual(
      srv.answers.filter((a) => a.id === ev.id).map((a) => a.status),
      [500, 500, 500, 204],
    );

    // An operator redelivers it: the handler answers 200 and does not handle it again.
    const list = await eventually("the delivery recorded as delivered", async () => {
      const l = await (await fetch(`${env.url}/v1/admin/deliveries?state=delivered&review_id=${id}`, { headers: admin })).json();
      return l.deliveries.length > 0 && l;
    }, 60_000);
    assert.equal(list.deliveries.length, 1);
    const res = await fetch(`${env.url}/v1/admin/deliveries/${list.deliveries[0].id}/redeliver`, { method: "POST", headers: admin });
    assert.equal(res.status, 200);
    await eventually("the redelivery answered", () => srv.answers.filter((a) => a.id === ev.id).length === 5, 60_000);
    assert.equal(srv.answers.filter((a) => a.id === ev.id).at(-1)?.status, 200);
    assert.equal(handled.length, 1);
  } finally {
    await srv.close();
  }
});
