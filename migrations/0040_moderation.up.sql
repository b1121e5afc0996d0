-- The moderation team's queue: requeue rounds, claims and holds recorded
-- as ledger events (the manual_queue projection keeps them, version 2 on),
-- SLA due times, and SLA breaches counted once.
ALTER TABLE manual_queue_candidate
	ADD COLUMN claims        text    NOT NULL DEFAULT 'optional',
	ADD COLUMN manual_sla_ms bigint  NOT NULL DEFAULT 0,
	ADD COLUMN round         integer NOT NULL DEFAULT 1;
ALTER TABLE manual_queue
	ADD COLUMN human_gate       boolean NOT NULL DEFAULT false,
	ADD COLUMN claims           text    NOT NULL DEFAULT 'optional',
	ADD COLUMN manual_sla_ms    bigint  NOT NULL DEFAULT 0,
	ADD COLUMN round            integer NOT NULL DEFAULT 1,
	ADD COLUMN due_at           timestamptz,
	ADD COLUMN claimed_by       text,
	ADD COLUMN claimed_at       timestamptz,
	ADD COLUMN claim_expires_at timestamptz,
	ADD COLUMN held_by          text,
	ADD COLUMN held_at          timestamptz,
	ADD COLUMN hold_note        text;
CREATE INDEX manual_queue_due_order ON manual_queue (priority DESC, due_at, escalated_at, review_id);
CREATE INDEX manual_queue_claim_expiry ON manual_queue (claim_expires_at) WHERE claim_expires_at IS NOT NULL;

-- Claims are ledger events now; the table the API wrote them to directly
-- is gone (a claim live at the upgrade is dropped: its holder claims again).
DROP TABLE manual_claim;

-- manual_sla_breach: each queue item whose due time passed while it was in
-- the queue, once per review and round. Written by the breach sweep, never
-- by a projection, so rebuilding the queue never counts a breach again.
CREATE TABLE manual_sla_breach (
	review_id     text        NOT NULL,
	round         integer     NOT NULL,
	content_class text        NOT NULL,
	due_at        timestamptz NOT NULL,
	counted_at    timestamptz NOT NULL,
	PRIMARY KEY (review_id, round)
);

-- slo_open.requeued: the review was sent back to the automated path; its
-- later escalations are not counted again (the SLO counts a review's first
-- stay in the queue).
ALTER TABLE slo_open ADD COLUMN requeued boolean NOT NULL DEFAULT false;
