// Shared by the tests: the servers TestE2ENode (cmd/reviewledger) started,
// clients for each role, the scripted provider's control, polling, and a
// TCP proxy that can drop and refuse connections.
import net from "node:net";
import { Client } from "@reviewledger/client";

/** What TestE2ENode passes; undefined when the tests run without it. */
export const env = {
  url: process.env.RL_URL,
  admissionUrl: process.env.RL_ADMISSION_URL,
  control: process.env.RL_PROVIDER_CONTROL,
  notifyAddr: process.env.RL_NOTIFY_ADDR,
  notifySecret: process.env.RL_NOTIFY_SECRET ?? "",
  tokens: {
    submitter: process.env.RL_TOKEN_SUBMITTER ?? "",
    moderator: process.env.RL_TOKEN_MODERATOR ?? "",
    moderator2: process.env.RL_TOKEN_MODERATOR2 ?? "",
    auditor: process.env.RL_TOKEN_AUDITOR ?? "",
    admin: process.env.RL_TOKEN_ADMIN ?? "",
  },
};

/**
 * The test options that skip a test when no server was started for it
 * (the tests run through `go test -run TestE2ENode ./cmd/reviewledger`).
 */
export const needsServer = env.url
  ? {}
  : { skip: "RL_URL is not set: run through go test -run TestE2ENode ./cmd/reviewledger, which starts reviewledger serve" };

/**
 * A client of the main server (or another URL) with the token of a role.
 * @param {keyof typeof env.tokens} role
 * @param {Partial<import("@reviewledger/client").ClientOptions>} [options]
 */
export function client(role, options = {}) {
  return new Client({ baseUrl: env.url ?? "http://127.0.0.1:9", token: env.tokens[role] || "no-server-was-started", backoffInitialMs: 50, ...options });
}

let seq = 0;
/** A review ID no other test uses. */
export function uniqueId(prefix) {
  seq++;
  return `${prefix}-${process.pid}-${seq}`;
}

/**
 * Scripts the provider's answers to a review's attempts: "accept",
 * "reject", "hang", "reset", "async:<state>", "status:<code>[:<Retry-After>]".
 * @param {string} reviewId
 * @param {string[]} steps
 */
export async function script(reviewId, ...steps) {
  const res = await fetch(`${env.control}/script`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ review_id: reviewId, steps }),
  });
  if (res.status !== 204) throw new Error(`script ${reviewId}: HTTP ${res.status} ${await res.text()}`);
}

/**
 * The provider's requests for a review.
 * @returns {Promise<{idempotency_key: string, attempt: string}[]>}
 */
export async function providerCalls(reviewId) {
  const res = await fetch(`${env.control}/calls?review_id=${encodeURIComponent(reviewId)}`);
  return res.json();
}

/**
 * Resolves with cond's value once it is truthy, polling; rejects after timeoutMs.
 * @template T
 * @param {string} what
 * @param {() => Promise<T> | T} cond
 * @returns {Promise<T>}
 */
export async function eventually(what, cond, timeoutMs = 30_000) {
  const until = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try {
      const v = await cond();
      if (v) return v;
      last = v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > until) throw new Error(`${what}: not within ${timeoutMs} ms (last: ${last})`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** A submission of a class, with content no other review has. */
export function submission(id, contentClass, text = `content of ${id}`) {
  return { review_id: id, content_class: contentClass, content_type: "text/plain", content: text };
}

/**
 * A TCP proxy to target (host:port) on a port of its own, which can drop
 * every connection and refuse new ones until it is let through again.
 * onRequest sees each chunk a client sends, with its connection: it
 * answers "forward" (the default) to pass it on, or "drop" to keep it
 * from the target; conn.loseAnswer() keeps the target's next answer from
 * the client and drops the client's connection once it has come.
 */
export async function tcpProxy(target, { onRequest } = {}) {
  const [host, port] = target.split(":");
  const sockets = new Set();
  let refusing = false;
  const server = net.createServer((client) => {
    if (refusing) {
      client.destroy();
      return;
    }
    const upstream = net.connect(Number(port), host);
    sockets.add(client);
    sockets.add(upstream);
    const close = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on("error", close).on("close", close);
    upstream.on("error", close).on("close", close);
    let losing = false;
    const conn = {
      socket: client,
      loseAnswer() {
        losing = true;
      },
    };
    client.on("data", (chunk) => {
      const verdict = onRequest?.(chunk, conn) ?? "forward";
      if (verdict === "forward") upstream.write(chunk);
    });
    upstream.on("data", (chunk) => {
      if (losing) close();
      else client.write(chunk);
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const addr = /** @type {net.AddressInfo} */ (server.address());
  return {
    url: `http://127.0.0.1:${addr.port}`,
    /** Drops every open connection; with refuse, new ones too until allow(). */
    cut(refuse = false) {
      refusing = refuse;
      for (const s of sockets) s.destroy();
      sockets.clear();
    },
    allow() {
      refusing = false;
    },
    close() {
      this.cut(true);
      return new Promise((resolve) => server.close(() => resolve(undefined)));
    },
  };
}

/** A 127.0.0.1 port nothing listens on now. */
export async function closedPort() {
  const s = net.createServer();
  await new Promise((resolve) => s.listen(0, "127.0.0.1", resolve));
  const { port } = /** @type {net.AddressInfo} */ (s.address());
  await new Promise((resolve) => s.close(resolve));
  return port;
}

/** The host:port of a URL. */
export function hostPort(url) {
  return new URL(url).host;
}
