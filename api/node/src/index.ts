/**
 * @reviewledger/client: the Node.js client of reviewledger's HTTP API.
 *
 * - `Client`: submit a review within a deadline, wait for its decision,
 *   read it, its events and timeline, work the manual queue and follow
 *   its live stream of changes.
 * - `verifyWebhook` and `createWebhookHandler`: receive the decision
 *   webhooks, verified as Standard Webhooks says and de-duplicated by
 *   webhook-id.
 * - Errors: every problem+json answer is a `ProblemError` (with `type`,
 *   `status`, `field`, `request_id`), of a subclass per kind.
 */
export * from "./client.js";
export * from "./errors.js";
export * from "./stream.js";
export * from "./webhooks.js";
export type { components, operations, paths, webhooks } from "./generated/openapi.js";
