// The OpenAPI document passes Redocly's recommended rules (its lint
// library, @redocly/openapi-core) with no error and no warning: any
// problem the rules find fails the test.
import assert from "node:assert/strict";
import { test } from "node:test";
import { createConfig, lint } from "@redocly/openapi-core";

const doc = new URL("../../openapi.json", import.meta.url).pathname;

test("api/openapi.json passes Redocly's recommended rules: no error, no warning", async () => {
  const config = await createConfig({ extends: ["recommended"] });
  const problems = await lint({ ref: doc, config });
  assert.deepEqual(
    problems.map((p) => `${p.severity} ${p.ruleId} ${p.location[0].pointer}: ${p.message}`),
    [],
    "Redocly's recommended rules find problems in api/openapi.json",
  );
});
