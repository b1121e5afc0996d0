-- The ledger: every event of every stream, one row each.
--
-- (stream, revision) is unique: concurrent appends at the same revision
-- collide on it, which is the whole of the optimistic concurrency check.
-- id is unique: an event ID is stored once across all streams.
-- xid is the writing transaction's ID; ReadAll orders by (xid, seq) and reads
-- only below the oldest running transaction, which makes the global order
-- gap-safe (docs/architecture.md, "Event store and global order").
CREATE TABLE event (
	seq         bigint GENERATED ALWAYS AS IDENTITY,
	xid         xid8 NOT NULL DEFAULT pg_current_xact_id(),
	stream      text NOT NULL,
	revision    bigint NOT NULL CHECK (revision >= 0),
	id          uuid NOT NULL,
	type        text NOT NULL CHECK (type <> ''),
	data        bytea NOT NULL,
	metadata    bytea NOT NULL,
	recorded_at timestamptz NOT NULL DEFAULT now(),
	CONSTRAINT event_pkey PRIMARY KEY (xid, seq),
	CONSTRAINT event_stream_revision_key UNIQUE (stream, revision),
	CONSTRAINT event_id_key UNIQUE (id)
);
