-- Review runner state kept beside the ledger (docs/runner.md).
--
-- runner_payload: the reviewed content, stored once per review and kept
-- apart from the events, which carry only its digest. Purged after the
-- retention period once the review has left the automated path.
CREATE TABLE runner_payload (
	review_id    text PRIMARY KEY,
	digest       text NOT NULL,
	content_type text NOT NULL,
	content      bytea NOT NULL,
	stored_at    timestamptz NOT NULL
);
CREATE INDEX runner_payload_stored_at_idx ON runner_payload (stored_at);

-- runner_pending: reviews still on the automated path (state pending). Rows
-- are written before the review's stream is created and deleted once the
-- runner or the sweeper sees the review leave pending. Resume and the
-- deadline sweeper read it; it never decides anything by itself: every row
-- is checked against the ledger.
CREATE TABLE runner_pending (
	review_id     text PRIMARY KEY,
	content_class text NOT NULL,
	deadline      timestamptz NOT NULL,
	created_at    timestamptz NOT NULL
);
CREATE INDEX runner_pending_deadline_idx ON runner_pending (deadline);

-- runner_webhook: callback webhook-ids already seen, for de-duplication.
-- A row only needs to outlive the signature tolerance (older timestamps are
-- refused anyway), so rows are purged after twice that.
CREATE TABLE runner_webhook (
	webhook_id  text PRIMARY KEY,
	review_id   text NOT NULL,
	outcome     text NOT NULL DEFAULT '',
	received_at timestamptz NOT NULL
);
CREATE INDEX runner_webhook_received_at_idx ON runner_webhook (received_at);
