// The examples of docs/api.md ("Node.js") and the README are the files
// of examples/, verbatim, and each runs against the real server.
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { test } from "node:test";
import { client, env, needsServer, submission, uniqueId } from "./helpers.js";
import { start } from "./proc.js";

const pkg = new URL("../", import.meta.url);
const examples = Object.fromEntries(
  readdirSync(new URL("examples/", pkg))
    .filter((f) => f.endsWith(".mjs"))
    .map((f) => [f, readFileSync(new URL(`examples/${f}`, pkg), "utf8")]),
);

/** The js code blocks of a Markdown text. */
function jsBlocks(md) {
  return [...md.matchAll(/^```js\n([\s\S]*?)^```$/gm)].map((m) => m[1]);
}

/** The section of md under the heading, to the next heading of its level. */
function section(md, heading) {
  const start = md.indexOf(`\n${heading}\n`);
  assert.ok(start >= 0, `no ${heading}`);
  const end = md.indexOf("\n## ", start + heading.length + 2);
  return md.slice(start, end < 0 ? undefined : end);
}

/** Which example each block is; fails on a block that is none. */
function examplesIn(blocks, where) {
  return blocks.map((b) => {
    const name = Object.keys(examples).find((f) => examples[f] === b);
    assert.ok(name, `a js block of ${where} is not a file of api/node/examples verbatim:\n${b}`);
    return name;
  });
}

test("docs/api.md's Node.js section and the README show the example files verbatim", () => {
  const docs = section(readFileSync(new URL("../../docs/api.md", pkg), "utf8"), "## Node.js");
  assert.deepEqual(examplesIn(jsBlocks(docs), "docs/api.md"), ["submit-and-wait.mjs", "webhook-receiver.mjs", "express-receiver.mjs"]);
  assert.match(docs, /npm install @reviewledger\/client/);
  const readme = readFileSync(new URL("README.md", pkg), "utf8");
  assert.deepEqual(examplesIn(jsBlocks(readme), "README.md").sort(), Object.keys(examples).sort());
  assert.equal(jsBlocks(readme)[0], examples["submit-and-wait.mjs"], "the README's first example is submit-and-wait");
  assert.ok(examples["submit-and-wait.mjs"].trim().split("\n").length <= 10, "submit and wait in ten lines");
});

const exampleEnv = () => ({
  REVIEWLEDGER_URL: env.url,
  SUBMITTER_TOKEN: env.tokens.submitter,
  MODERATOR_TOKEN: env.tokens.moderator,
  NOTIFY_SECRET: env.notifySecret,
  HOST: env.notifyAddr?.split(":")[0],
  PORT: env.notifyAddr?.split(":")[1],
});

test("the submit-and-wait example submits a review and prints its outcome", needsServer, async () => {
  const p = start(process.execPath, ["examples/submit-and-wait.mjs"], { cwd: pkg.pathname, env: exampleEnv() });
  const { code } = await p.exited;
  assert.equal(code, 0, p.stderr);
  assert.equal(p.stdout, "caption-4711 accepted\n");
});

for (const file of ["webhook-receiver.mjs", "express-receiver.mjs"]) {
  test(`the ${file} example receives the server's decision webhooks`, needsServer, async () => {
    const p = start(process.execPath, [`examples/${file}`], { cwd: pkg.pathname, env: exampleEnv() });
    try {
      // Listening once any request is answered.
      const base = `http://${env.notifyAddr}`;
      for (let i = 0; ; i++) {
        const up = await fetch(`${base}/`).then(() => true, () => false);
        if (up) break;
        assert.ok(i < 600 && p.child.exitCode === null, `the example did not listen on ${base}:\n${p.stderr}`);
        await new Promise((r) => setTimeout(r, 50));
      }
      const id = uniqueId("node-example-hook");
      await client("submitter").submit(submission(id, "node_fast"));
      await p.waitFor(new RegExp(`^review\\.decided ${id} accepted$`), 60_000);
    } finally {
      await p.stop();
    }
  });
}

test("the queue-stream example prints the queue's changes", needsServer, async () => {
  const p = start(process.execPath, ["examples/queue-stream.mjs"], { cwd: pkg.pathname, env: exampleEnv() });
  try {
    await p.waitFor(/^live$/);
    const id = uniqueId("node-example-stream");
    await client("submitter").submit(submission(id, "node_gate"));
    const line = await p.waitFor(new RegExp(` added ${id}$`));
    assert.match(line, /^\d+-\d+ added /);
  } finally {
    await p.stop();
  }
});
