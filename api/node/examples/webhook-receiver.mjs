import http from "node:http";
import { createWebhookHandler } from "@reviewledger/client";

const handler = createWebhookHandler({
  secret: process.env.NOTIFY_SECRET ?? "", // REVIEWLEDGER_NOTIFY_SECRET of the server
  async onEvent(event) {
    // Called once per webhook-id (redeliveries are answered 200 without it); throw, and it comes again later.
    console.log(event.type, event.review.review_id, event.review.state);
  },
});
const server = http.createServer((req, res) => (req.url === "/webhooks" ? handler(req, res) : res.writeHead(404).end()));
server.listen(Number(process.env.PORT ?? 3000), process.env.HOST ?? "127.0.0.1");
