// The OpenAPI document passes Redocly's recommended rules (its lint
// library, @redocly/openapi-core): no error, and no warning but those kept
// below, each for a reason of the API's own.
import assert from "node:assert/strict";
import { test } from "node:test";
import { createConfig, lint } from "@redocly/openapi-core";

const doc = new URL("../../openapi.json", import.meta.url).pathname;

// Warnings the document keeps, each for a reason of the API's own.
const kept = [
  // The probes and the documents served to anyone answer every request
  // they route: there is no client error to document for them, and a
  // made-up one would be a false contract.
  ...["/healthz", "/readyz", "/metrics", "/openapi.json"].flatMap((path) =>
    ["get", "head"].map((method) => ["operation-4xx-response", `#/paths/${path.replaceAll("/", "~1")}/${method}/responses`]),
  ),
].map(([rule, pointer]) => `${rule} ${pointer}`);

test("api/openapi.json passes Redocly's recommended rules", async () => {
  const config = await createConfig({ extends: ["recommended"] });
  const problems = await lint({ ref: doc, config });
  const key = (p) => `${p.ruleId} ${p.location[0].pointer}`;
  const left = problems.filter((p) => !(p.severity === "warn" && kept.includes(key(p))));
  assert.deepEqual(
    left.map((p) => `${p.severity} ${key(p)}: ${p.message}`),
    [],
    "Redocly's recommended rules find problems in api/openapi.json",
  );
  assert.deepEqual(
    problems.filter((p) => !left.includes(p)).map(key).sort(),
    [...kept].sort(),
    "every warning kept on purpose is still there (drop it from the list once it is not)",
  );
});
