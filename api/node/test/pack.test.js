// npm pack makes a tarball that a scratch project installs, with nothing
// else, and uses with the README's example against the running server;
// its type declarations serve a TypeScript project.
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { env, needsServer } from "./helpers.js";
import { run } from "./proc.js";

const pkg = new URL("../", import.meta.url).pathname;

test("the npm pack tarball installs in a scratch project and runs the README example", needsServer, async () => {
  const dir = mkdtempSync(join(tmpdir(), "rl-pack-"));
  try {
    const { stdout } = await run("npm", ["pack", "--json", "--pack-destination", dir], { cwd: pkg });
    const [info] = JSON.parse(stdout.slice(stdout.indexOf("[")));
    const files = info.files.map((f) => f.path).sort();
    for (const f of ["package.json", "README.md", "dist/index.js", "dist/index.d.ts", "dist/generated/openapi.d.ts"]) {
      assert.ok(files.includes(f), `${f} is not in the tarball: ${files}`);
    }
    for (const f of files) assert.match(f, /^(package\.json|README\.md|dist\/.*)$/, "nothing but the build, the README and the manifest");
    assert.deepEqual(JSON.parse(readFileSync(join(pkg, "package.json"), "utf8")).dependencies ?? {}, {}, "no runtime dependency");

    const scratch = join(dir, "scratch");
    await run("mkdir", [scratch]);
    writeFileSync(join(scratch, "package.json"), JSON.stringify({ name: "scratch", private: true, type: "module" }));
    await run("npm", ["install", "--no-audit", "--no-fund", "--loglevel=error", join(dir, info.filename)], { cwd: scratch });

    const readme = readFileSync(join(pkg, "README.md"), "utf8");
    const example = /^```js\n([\s\S]*?)^```$/m.exec(readme)?.[1];
    assert.ok(example, "the README has a js example");
    writeFileSync(join(scratch, "example.mjs"), example);
    const out = await run(process.execPath, ["example.mjs"], {
      cwd: scratch,
      env: { REVIEWLEDGER_URL: env.url, SUBMITTER_TOKEN: env.tokens.submitter },
    });
    assert.equal(out.stdout, "caption-4711 accepted\n");

    writeFileSync(
      join(scratch, "check.ts"),
      [
        'import { Client, DeadlineExceededError, type Review, type Submission } from "@reviewledger/client";',
        'const s: Submission = { review_id: "r1", content_class: "c", content: "x" };',
        'const state: Review["state"] = "manual_review";',
        "export async function f(c: Client): Promise<Review> {",
        "  try { return (await c.submit(s, { deadline: 1000 })).review; }",
        "  catch (e) { if (e instanceof DeadlineExceededError) console.log(e.tries, state); throw e; }",
        "}",
        "",
      ].join("\n"),
    );
    await run(
      process.execPath,
      [join(pkg, "node_modules/typescript/bin/tsc"), "--noEmit", "--strict", "--module", "nodenext", "--moduleResolution", "nodenext",
        "--target", "es2022", "--types", "node", "--typeRoots", join(pkg, "node_modules/@types"), "check.ts"],
      { cwd: scratch },
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
