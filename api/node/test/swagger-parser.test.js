// The OpenAPI document is valid for swagger-parser (@apidevtools/
// swagger-parser): the OpenAPI 3.1 schema holds and every $ref resolves.
import assert from "node:assert/strict";
import { test } from "node:test";
import SwaggerParser from "@apidevtools/swagger-parser";

const doc = new URL("../../openapi.json", import.meta.url).pathname;

test("api/openapi.json is valid for swagger-parser", async () => {
  const api = await SwaggerParser.validate(doc);
  assert.equal(api.openapi, "3.1.0");
});
