-- Projections: read models fed from the ledger's global order
-- (docs/projections.md).
--
-- Every projection owns a set of tables that it alone writes and that a
-- rebuild replaces together. projection_checkpoint records, per projection,
-- the global position of the last event applied, committed in the same
-- transaction as the rows, and the code version that built them.
CREATE TABLE projection_checkpoint (
	name             text PRIMARY KEY,
	version          integer NOT NULL,
	position_commit  bigint NOT NULL DEFAULT 0,
	position_prepare bigint NOT NULL DEFAULT 0,
	events           bigint NOT NULL DEFAULT 0,
	last_recorded_at timestamptz,
	updated_at       timestamptz NOT NULL DEFAULT now(),
	rebuilt_at       timestamptz
);

-- review_summary: one row per review.
CREATE TABLE review_summary (
	review_id         text PRIMARY KEY,
	content_class     text NOT NULL,
	state             text NOT NULL,
	attempts          integer NOT NULL,
	version           bigint NOT NULL,
	submitted_at      timestamptz NOT NULL,
	deadline          timestamptz NOT NULL,
	decided_at        timestamptz,
	decided_by        text,
	reasons           jsonb NOT NULL DEFAULT '[]',
	escalation_reason text,
	escalated_at      timestamptz,
	human_gate        boolean NOT NULL,
	updated_at        timestamptz NOT NULL
);
CREATE INDEX review_summary_pending ON review_summary (deadline, review_id) WHERE state = 'pending';

-- manual_queue: reviews in manual_review. manual_queue_candidate holds what
-- the queue needs from Submitted (class, priority, approvals) until the
-- review escalates or ends.
CREATE TABLE manual_queue_candidate (
	review_id          text PRIMARY KEY,
	content_class      text NOT NULL,
	priority           integer NOT NULL,
	required_approvals integer NOT NULL,
	human_gate         boolean NOT NULL
);
CREATE TABLE manual_queue (
	review_id          text PRIMARY KEY,
	content_class      text NOT NULL,
	priority           integer NOT NULL,
	reason             text NOT NULL,
	attempts           integer NOT NULL,
	escalated_at       timestamptz NOT NULL,
	version            bigint NOT NULL,
	required_approvals integer NOT NULL,
	approvers          text[] NOT NULL DEFAULT '{}'
);
CREATE INDEX manual_queue_order ON manual_queue (priority DESC, escalated_at, review_id);
CREATE INDEX manual_queue_class_order ON manual_queue (content_class, priority DESC, escalated_at, review_id);

-- Claims are written by moderators, not by the projection, so a rebuild
-- keeps them. A claim whose review left the queue is ignored.
CREATE TABLE manual_claim (
	review_id  text PRIMARY KEY,
	moderator  text NOT NULL,
	claimed_at timestamptz NOT NULL,
	expires_at timestamptz NOT NULL
);

-- SLO read models, per content class and minute. Review outcomes count in
-- the minute the review was submitted (a cohort); attempts in the minute
-- they ended. Histogram rows hold counts per fixed log-spaced bucket.
CREATE TABLE slo_open (
	review_id        text PRIMARY KEY,
	content_class    text NOT NULL,
	submitted_at     timestamptz NOT NULL,
	deadline         timestamptz NOT NULL,
	human_gate       boolean NOT NULL,
	outcome_recorded boolean NOT NULL,
	completed        boolean NOT NULL
);
CREATE TABLE slo_minute (
	content_class           text NOT NULL,
	minute                  timestamptz NOT NULL,
	submitted               bigint NOT NULL,
	completed_within_budget bigint NOT NULL,
	escalated               bigint NOT NULL,
	PRIMARY KEY (content_class, minute)
);
CREATE INDEX slo_minute_minute ON slo_minute (minute);
CREATE TABLE slo_latency (
	content_class text NOT NULL,
	minute        timestamptz NOT NULL,
	bucket        smallint NOT NULL,
	n             bigint NOT NULL,
	PRIMARY KEY (content_class, minute, bucket)
);
CREATE INDEX slo_latency_minute ON slo_latency (minute);
-- outcome: finding, timeout (deadline_exceeded) or failure (any other
-- classification).
CREATE TABLE slo_attempt (
	content_class text NOT NULL,
	minute        timestamptz NOT NULL,
	outcome       text NOT NULL,
	bucket        smallint NOT NULL,
	n             bigint NOT NULL,
	PRIMARY KEY (content_class, minute, outcome, bucket)
);
CREATE INDEX slo_attempt_minute ON slo_attempt (minute);

-- Conflicting completions are not ledger events (a late finding fails its
-- expected-revision check and is never appended); the review path records
-- them here directly, so no rebuild touches this table.
CREATE TABLE slo_conflict (
	content_class text NOT NULL,
	minute        timestamptz NOT NULL,
	n             bigint NOT NULL,
	PRIMARY KEY (content_class, minute)
);
