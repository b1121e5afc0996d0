import express from "express";
import { createWebhookHandler } from "@reviewledger/client";

const app = express();
// Mount it before any body parser (or after express.raw()): the signature is over the raw body.
app.post(
  "/webhooks",
  createWebhookHandler({
    secret: process.env.NOTIFY_SECRET ?? "",
    onEvent: (event) => console.log(event.type, event.review.review_id, event.review.state),
  }),
);
app.listen(Number(process.env.PORT ?? 3000), process.env.HOST ?? "127.0.0.1");
