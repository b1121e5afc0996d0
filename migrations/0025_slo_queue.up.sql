-- slo_queue: when each review entered the manual queue and, once a
-- moderator decided it, when it left; the queue's depth and oldest age at
-- any past instant are read from it (GET /v1/slo/series). Owned by the slo
-- projection from its version 3 on, which rebuilds it from the ledger.
CREATE TABLE slo_queue (
	review_id     text PRIMARY KEY,
	content_class text NOT NULL,
	entered_at    timestamptz NOT NULL,
	left_at       timestamptz
);
CREATE INDEX slo_queue_entered ON slo_queue (entered_at);
CREATE INDEX slo_queue_left ON slo_queue (left_at);
