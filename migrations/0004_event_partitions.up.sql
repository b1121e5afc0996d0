-- Partitioning the ledger, step 3 of 3 (docs/architecture.md, "Growth
-- without rewrites: partitioning the ledger"): event becomes a table
-- partitioned by range of seq, so that old events are archived by
-- detaching whole partitions (reviewledger ledger detach), with no rewrite
-- and no long lock. No row is moved: the table as it is becomes the first
-- partition, event_p0, attached with the bound 0002 added and 0003
-- validated, so ATTACH does not scan it.
--
-- A unique constraint of a partitioned table must hold the partition key,
-- so two guarantees move:
--   - expected-version uniqueness: event_stream holds each stream's last
--     revision, one row a stream, written by the append's own statement
--     (INSERT … ON CONFLICT (stream) DO UPDATE … WHERE <expectation>), so
--     concurrent appends to a stream serialize on its head row;
--   - event ID uniqueness: each partition has its own unique index on id,
--     and an append checks the IDs against every partition before it
--     inserts (eventstore/pgstore/append.go).
-- Each partition keeps the indexes of 0001: (xid, seq), the partitioned
-- primary key, for the global order; (stream, revision) for stream reads;
-- id for the idempotency lookup.
--
-- seq stays GENERATED ALWAYS AS IDENTITY, on the parent: its sequence goes
-- on from the old table's. Partitions have none of their own (PostgreSQL 15
-- does not pass identity on to partitions): a row inserted into a
-- partition directly, not through event, is refused for its NULL seq.
-- Each stream's last revision; a stream has a row once it has an event.
-- Filled from the ledger in one pass over its (stream, revision) index
-- (about 0.3 s a million events), the one step whose time grows with the
-- ledger; appends wait for it (SHARE lock), reads go on.
CREATE TABLE event_stream (
	stream   text PRIMARY KEY,
	revision bigint NOT NULL CHECK (revision >= 0)
);
LOCK TABLE event IN SHARE MODE;
INSERT INTO event_stream (stream, revision)
SELECT stream, max(revision) FROM event GROUP BY stream;

DO $$
DECLARE
	bound bigint;
	next  bigint;
BEGIN
	SELECT (regexp_match(pg_get_constraintdef(oid), '(\d+)'))[1]::bigint INTO bound
	FROM pg_constraint WHERE conrelid = 'event'::regclass AND conname = 'event_seq_bound';
	EXECUTE format('SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM %s',
		pg_get_serial_sequence('event', 'seq')) INTO next;

	ALTER TABLE event ALTER COLUMN seq DROP IDENTITY; -- and its sequence
	ALTER TABLE event RENAME TO event_p0;
	ALTER TABLE event_p0 RENAME CONSTRAINT event_pkey TO event_p0_pkey;
	ALTER TABLE event_p0 RENAME CONSTRAINT event_stream_revision_key TO event_p0_stream_revision_key;
	ALTER TABLE event_p0 RENAME CONSTRAINT event_id_key TO event_p0_id_key;

	CREATE TABLE event (
		seq         bigint GENERATED ALWAYS AS IDENTITY,
		xid         xid8 NOT NULL DEFAULT pg_current_xact_id(),
		stream      text NOT NULL,
		revision    bigint NOT NULL CONSTRAINT event_revision_check CHECK (revision >= 0),
		id          uuid NOT NULL,
		type        text NOT NULL CONSTRAINT event_type_check CHECK (type <> ''),
		data        bytea NOT NULL,
		metadata    bytea NOT NULL,
		recorded_at timestamptz NOT NULL DEFAULT now(),
		CONSTRAINT event_pkey PRIMARY KEY (xid, seq)
	) PARTITION BY RANGE (seq);
	EXECUTE format('ALTER TABLE event ALTER COLUMN seq RESTART WITH %s', next);
	EXECUTE format('ALTER TABLE event ATTACH PARTITION event_p0 FOR VALUES FROM (MINVALUE) TO (%s)', bound);
	ALTER TABLE event_p0 DROP CONSTRAINT event_seq_bound;
END
$$;

-- A DELETE or UPDATE of events by SQL (the service makes none: a repair,
-- or tampering that audit verify is to find) moves the heads of the
-- streams it touched to their last revision still stored, as the head was
-- max(revision) before, and removes the head of a stream left with no
-- event. Detaching a partition deletes nothing: heads stay.
CREATE FUNCTION event_stream_refresh(streams text[]) RETURNS void
LANGUAGE sql AS $$
	WITH last AS (
		SELECT t.stream, (SELECT max(e.revision) FROM event e WHERE e.stream = t.stream) AS revision
		FROM unnest(streams) AS t(stream)
	), gone AS (
		DELETE FROM event_stream h USING last WHERE h.stream = last.stream AND last.revision IS NULL
	)
	INSERT INTO event_stream (stream, revision)
	SELECT stream, revision FROM last WHERE revision IS NOT NULL
	ON CONFLICT (stream) DO UPDATE SET revision = excluded.revision
	WHERE event_stream.revision <> excluded.revision
$$;
CREATE FUNCTION event_stream_follow() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP = 'DELETE' THEN
		PERFORM event_stream_refresh(ARRAY(SELECT DISTINCT stream FROM old_rows));
	ELSE
		PERFORM event_stream_refresh(ARRAY(SELECT stream FROM old_rows UNION SELECT stream FROM new_rows));
	END IF;
	RETURN NULL;
END
$$;
CREATE TRIGGER event_deleted AFTER DELETE ON event
	REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION event_stream_follow();
CREATE TRIGGER event_updated AFTER UPDATE ON event
	REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION event_stream_follow();

-- The partitions of event with their bounds: lower is NULL for the first
-- (MINVALUE); detaching is true while a DETACH … CONCURRENTLY is under way.
CREATE VIEW event_partition AS
SELECT c.relname::text AS name,
	(regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''?(-?\d+)''?\)'))[1]::bigint AS lower,
	(regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''?(-?\d+)''?\)'))[1]::bigint AS upper,
	i.inhdetachpending AS detaching
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'event'::regclass;

-- event_next_seq returns the seq the next row of event will get (or a
-- higher one, when appends take seqs meanwhile).
CREATE FUNCTION event_next_seq() RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
	n bigint;
BEGIN
	EXECUTE format('SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM %s',
		pg_get_serial_sequence('event', 'seq')) INTO STRICT n;
	RETURN n;
END
$$;

-- event_partitions_ensure creates the partitions, each width seqs wide
-- (event_partitioning), that cover the next ahead widths of seq above its
-- next value, and returns how many it created. A row whose seq has no
-- partition is refused (there is no DEFAULT partition); pgstore calls this
-- when a store starts and when an append is refused so, then appends
-- again. A partition is created empty and attached (SHARE UPDATE EXCLUSIVE
-- on event: appends and reads go on), under an advisory lock, so that
-- concurrent calls create each partition once.
CREATE FUNCTION event_partitions_ensure(ahead integer DEFAULT 2) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
	w    bigint;
	top  bigint;
	next bigint;
	made integer := 0;
	name text;
BEGIN
	PERFORM pg_advisory_xact_lock(x'726c706172746e73'::bigint); -- "rlpartns"
	SELECT width INTO STRICT w FROM event_partitioning;
	SELECT max(upper) INTO STRICT top FROM event_partition;
	IF top IS NULL THEN
		RAISE EXCEPTION 'event has no bounded partition';
	END IF;
	next := event_next_seq();
	WHILE top <= next + ahead::bigint * w LOOP
		name := 'event_p' || top;
		EXECUTE format('CREATE TABLE %I (LIKE event INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', name);
		EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I PRIMARY KEY (xid, seq), '
			'ADD CONSTRAINT %I UNIQUE (stream, revision), ADD CONSTRAINT %I UNIQUE (id)',
			name, name || '_pkey', name || '_stream_revision_key', name || '_id_key');
		EXECUTE format('ALTER TABLE event ATTACH PARTITION %I FOR VALUES FROM (%s) TO (%s)', name, top, top + w);
		top := top + w;
		made := made + 1;
	END LOOP;
	RETURN made;
END
$$;

SELECT event_partitions_ensure(2);
