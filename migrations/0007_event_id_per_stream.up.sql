-- An event ID is unique within its stream, not across the ledger
-- (docs/architecture.md, "Event IDs, unique within their stream"): each
-- partition's unique index on id (partition_id_key, 0004) goes, and an
-- append that may meet its own IDs in its stream checks them after its
-- insert, in its own transaction, holding the streams' heads
-- (event_ids_unique, below).
--
-- The index took about 120 bytes a review on the bench's ledger of 4.66
-- million reviews, the largest part of the ledger that no read needs, and
-- every append probed it in every partition. What it guaranteed beyond the
-- stream: that an ID stored in one stream is refused in another. The
-- ledger draws a fresh random ID for every event, so only a bug could
-- reuse one, and a reused ID cannot make a review take two decisions (the
-- expected-revision check on the head guards each stream); KurrentDB does
-- not make that check either, so every backend now keeps the same promise.
--
-- Dropping an index is a change of the catalog and the removal of its
-- files: no rewrite. It takes each partition's ACCESS EXCLUSIVE lock, held
-- to the end of the migration, so a long reader of the ledger (audit
-- verify, a rebuild, pg_dump) holds it up and appends wait behind it
-- (docs/operations.md, the upgrade note of 0007).

-- event_ids_twice: the IDs that one of streams holds twice, one of the two
-- written by the current transaction, so that a repeat already stored
-- stops no later append (such as the copy `ledger detach` makes of the
-- streams it keeps, the policy snapshots, before their partition goes).
-- A SQL function, so that the planner inlines it and its plan can be
-- seen: each partition's index by stream, the streams' few rows.
CREATE FUNCTION event_ids_twice(streams text[]) RETURNS TABLE (stream text, id uuid)
LANGUAGE sql STABLE AS $$
	SELECT e.stream, e.id FROM event e
	WHERE e.stream = ANY(streams)
	GROUP BY e.stream, e.id
	HAVING count(*) > 1 AND bool_or(e.xid = pg_current_xact_id_if_assigned())
$$;

-- event_ids_unique fails with a unique violation of event_stream_id when
-- event_ids_twice finds one.
CREATE FUNCTION event_ids_unique(streams text[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
	dup record;
BEGIN
	SELECT t.stream, t.id INTO dup FROM event_ids_twice(streams) AS t LIMIT 1;
	IF FOUND THEN
		RAISE EXCEPTION 'event % is stored twice in stream %', dup.id, dup.stream
			USING ERRCODE = 'unique_violation', CONSTRAINT = 'event_stream_id';
	END IF;
END
$$;

CREATE OR REPLACE FUNCTION event_partitions_ensure(ahead integer DEFAULT 2) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
	w     bigint;
	top   bigint;
	next  bigint;
	made  integer := 0;
	name  text;
	keyed boolean;
BEGIN
	PERFORM pg_advisory_xact_lock(x'726c706172746e73'::bigint); -- "rlpartns"
	SELECT width INTO STRICT w FROM event_partitioning;
	SELECT max(upper) INTO STRICT top FROM event_partition;
	IF top IS NULL THEN
		RAISE EXCEPTION 'event has no bounded partition';
	END IF;
	keyed := EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = 'event'::regclass AND contype = 'p');
	next := event_next_seq();
	WHILE top <= next + ahead::bigint * w LOOP
		name := 'event_p' || top;
		EXECUTE format('CREATE TABLE %I (LIKE event INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', name);
		IF keyed THEN
			EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I PRIMARY KEY (xid, seq)', name, name || '_pkey');
		ELSE
			EXECUTE format('CREATE INDEX %I ON %I (xid)', name || '_xid_idx', name);
		END IF;
		EXECUTE format('CREATE INDEX %I ON %I (stream)', name || '_stream_idx', name);
		EXECUTE format('ALTER TABLE event ATTACH PARTITION %I FOR VALUES FROM (%s) TO (%s)', name, top, top + w);
		top := top + w;
		made := made + 1;
	END LOOP;
	RETURN made;
END
$$;

DO $$
DECLARE
	p text;
BEGIN
	FOR p IN SELECT name FROM event_partition ORDER BY lower NULLS FIRST LOOP
		EXECUTE format('ALTER TABLE %I DROP CONSTRAINT IF EXISTS %I', p, p || '_id_key');
	END LOOP;
END
$$;
