-- Decision webhooks (docs/api.md, "Decision webhooks"; docs/operations.md,
-- "Decision webhooks"). The notifier follows the ledger's global order like
-- a projection: notify_checkpoint is where it has read to, and every
-- delivery it creates from the events it read is inserted in the same
-- transaction that moves the checkpoint, so none is lost or made twice.
CREATE TABLE notify_checkpoint (
	name             text PRIMARY KEY,
	position_commit  bigint NOT NULL,
	position_prepare bigint NOT NULL,
	events           bigint NOT NULL DEFAULT 0,
	updated_at       timestamptz NOT NULL DEFAULT now()
);

-- One row per webhook to send: a review reaching manual_review or a final
-- state. id is the webhook-id, the ledger event's ID, the same on every
-- attempt. body is the exact JSON signed and sent. A review's deliveries
-- are sent in revision order: one waits while an earlier one of the same
-- review is not delivered.
CREATE TABLE notify_delivery (
	id               text PRIMARY KEY,
	review_id        text NOT NULL,
	revision         bigint NOT NULL CHECK (revision >= 0),
	event_type       text NOT NULL,
	body             text NOT NULL,
	state            text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed')),
	attempts         integer NOT NULL DEFAULT 0,
	created_at       timestamptz NOT NULL,
	-- Retries go on until retry_since plus the retry window; a
	-- redelivery opens a new window.
	retry_since      timestamptz NOT NULL,
	next_attempt_at  timestamptz NOT NULL,
	last_attempt_at  timestamptz,
	last_status      integer,
	last_error       text,
	delivered_at     timestamptz,
	UNIQUE (review_id, revision)
);

-- The sender's due work.
CREATE INDEX notify_delivery_due ON notify_delivery (next_attempt_at) WHERE state = 'pending';
-- Earlier undelivered deliveries of a review, which hold back its later ones.
CREATE INDEX notify_delivery_undelivered ON notify_delivery (review_id, revision) WHERE state <> 'delivered';
-- Listing and pruning by age.
CREATE INDEX notify_delivery_created ON notify_delivery (created_at);
