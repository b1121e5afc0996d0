import { Client } from "@reviewledger/client";

const moderator = new Client({ baseUrl: process.env.REVIEWLEDGER_URL ?? "http://localhost:8080", token: process.env.MODERATOR_TOKEN ?? "" });
const stream = moderator.queueEvents({ lastEventId: process.env.LAST_EVENT_ID }); // resume after a saved position
for await (const change of stream) {
  if (change.event === "ready") console.log("live");
  else console.log(change.id, change.event, change.data.review_id); // change.id: the position to save
}
