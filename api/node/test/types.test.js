// The generated types are those of the server's OpenAPI document: the
// committed file is what `npm run generate` makes of api/openapi.json now,
// and that document is the one the server serves.
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { env, needsServer } from "./helpers.js";
import { run } from "./proc.js";

const pkg = new URL("../", import.meta.url).pathname;

test("src/generated/openapi.ts is current: npm run generate makes it again from api/openapi.json", async () => {
  const dir = mkdtempSync(join(tmpdir(), "rl-types-"));
  try {
    const out = join(dir, "openapi.ts");
    // The generate script's own command, writing elsewhere.
    const [cmd, ...args] = JSON.parse(readFileSync(join(pkg, "package.json"), "utf8")).scripts.generate.split(" ");
    assert.equal(cmd, "openapi-typescript");
    args[args.indexOf("--output") + 1] = out;
    await run(process.execPath, ["node_modules/openapi-typescript/bin/cli.js", ...args], { cwd: pkg });
    const want = readFileSync(out, "utf8");
    const got = readFileSync(join(pkg, "src/generated/openapi.ts"), "utf8");
    assert.ok(got === want, "src/generated/openapi.ts differs from api/openapi.json's types: run npm run generate in api/node");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("the types are generated from the document the server serves", needsServer, async () => {
  const served = await (await fetch(`${env.url}/openapi.json`)).text();
  assert.ok(served === readFileSync(join(pkg, "../openapi.json"), "utf8"), "GET /openapi.json differs from api/openapi.json");
});
