-- Partitioning the ledger, step 1 of 3 (docs/architecture.md, "Growth
-- without rewrites: partitioning the ledger"). The table as it is becomes
-- the first partition of a ledger partitioned by range of seq (0004). To
-- attach it without scanning it under an exclusive lock, it must carry a
-- validated CHECK constraint that implies its range: added here NOT VALID
-- (a catalog change, no scan) and validated by 0003 in a transaction of
-- its own, which scans while appends go on.
--
-- The bound leaves at least one partition's width (event_partitioning) of
-- headroom above the sequence's current value for the appends made while
-- 0003 runs.
CREATE TABLE event_partitioning (
	one   boolean PRIMARY KEY DEFAULT true CHECK (one),
	width bigint NOT NULL CHECK (width > 0)
);
INSERT INTO event_partitioning (width) VALUES (10000000);

DO $$
DECLARE
	w     bigint := (SELECT width FROM event_partitioning);
	last  bigint;
BEGIN
	EXECUTE format('SELECT last_value FROM %s', pg_get_serial_sequence('event', 'seq')) INTO last;
	EXECUTE format('ALTER TABLE event ADD CONSTRAINT event_seq_bound CHECK (seq < %s) NOT VALID', (last / w + 2) * w);
END
$$;
