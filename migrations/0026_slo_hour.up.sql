-- Hourly rollups of the SLO read models: the same counts as slo_minute,
-- slo_latency, slo_attempt and slo_conflict, summed per hour (UTC) and
-- written in the same transaction as the minutes. A long window reads its
-- whole hours from these and only its ragged ends from the minutes: 30 days
-- are 720 hour rows per class and bucket instead of 43,200 minute rows.
-- Owned by the slo projection from its version 5 on, which fills them
-- from the ledger when it rebuilds on start.
-- The primary keys lead with the hour: every query is a range of hours,
-- for one class or all.
CREATE TABLE slo_hour (
	hour                    timestamptz NOT NULL,
	content_class           text NOT NULL,
	submitted               bigint NOT NULL,
	completed_within_budget bigint NOT NULL,
	escalated               bigint NOT NULL,
	PRIMARY KEY (hour, content_class)
);
CREATE TABLE slo_latency_hour (
	hour          timestamptz NOT NULL,
	content_class text NOT NULL,
	bucket        smallint NOT NULL,
	n             bigint NOT NULL,
	PRIMARY KEY (hour, content_class, bucket)
);
CREATE TABLE slo_attempt_hour (
	hour          timestamptz NOT NULL,
	content_class text NOT NULL,
	outcome       text NOT NULL,
	bucket        smallint NOT NULL,
	n             bigint NOT NULL,
	PRIMARY KEY (hour, content_class, outcome, bucket)
);
CREATE TABLE slo_conflict_hour (
	hour          timestamptz NOT NULL,
	content_class text NOT NULL,
	n             bigint NOT NULL,
	PRIMARY KEY (hour, content_class)
);
