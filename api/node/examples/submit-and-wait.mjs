import { Client } from "@reviewledger/client";

const client = new Client({ baseUrl: process.env.REVIEWLEDGER_URL ?? "http://localhost:8080", token: process.env.SUBMITTER_TOKEN ?? "" });
const { review } = await client.submit(
  { review_id: "caption-4711", content_class: "caption_suggestion", content_type: "text/plain", content: "A new caption" },
  { deadline: 10_000 }, // give up after 10 s with a DeadlineExceededError: never a decision
);
const decided = await client.waitForDecision(review.review_id, { signal: AbortSignal.timeout(60_000) });
console.log(decided.review_id, decided.state); // accepted, rejected, or manual_review (a moderator decides later)
