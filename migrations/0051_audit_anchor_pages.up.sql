-- Audit anchors packed in pages: the anchors of up to 128 reviews in one
-- row, instead of a row and a key a review (docs/operations.md, "Audit";
-- docs/architecture.md, "Audit anchors in pages").
--
-- A row of audit_anchor cost some 131 bytes a review with its key at
-- 3,000,000 reviews, about half of it the row's header, line pointer and
-- index entry. A page holds its reviews' anchors one after the other,
-- in the order of their review IDs, each
--   the review ID's length in bytes (2 bytes, big-endian),
--   the review ID (UTF-8),
--   the revision anchored (8 bytes, big-endian),
--   the hash of the event at that revision (32 bytes);
-- the value is compressed (lz4, below) and stored out of line by
-- PostgreSQL (TOAST).
--
-- Review IDs are ordered by their bytes (COLLATE "C") wherever pages are
-- concerned, whatever the database's collation: the order is written
-- into the pages, which a REINDEX after a change of the system's
-- collation rules could not put right. first_id is the least review ID of
-- the page: pages never overlap, so the page of a review is the one with
-- the greatest first_id not after it. anchored_at is when an anchor of
-- the page last moved (a review's own time is not kept: nothing read it).
-- The checks audit_anchor made on each row (a revision not negative, a
-- hash of 32 bytes) are made by the writer (api/audit, PGAnchors.Advance)
-- and the reader, which refuses a page it cannot read.
--
-- The anchors are copied into pages, in the order of their IDs, and the
-- old table dropped, under its ACCESS EXCLUSIVE lock: only `reviewledger
-- audit verify` reads or writes them, and one that starts meanwhile, of
-- either release, waits for the copy. Grants or comments on the old
-- table are not carried over.
CREATE TABLE audit_anchor_page (
	first_id    text COLLATE "C" PRIMARY KEY,
	anchored_at timestamptz NOT NULL,
	anchors     bytea NOT NULL CHECK (octet_length(anchors) > 0)
);
-- lz4 where the server has it: a page of 128 anchors of the bench's review
-- IDs, 6,801 bytes, is stored in 5,220 (the IDs and revisions are what it
-- saves; the hashes do not compress), where the default method, pglz,
-- gives up on it and stores it whole. A server built without lz4 keeps
-- the default.
DO $$
BEGIN
	ALTER TABLE audit_anchor_page ALTER COLUMN anchors SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
	RAISE NOTICE 'audit_anchor_page: lz4 not supported by this server, anchors compressed with the default method';
END
$$;

-- audit_anchor_entry is one anchor as a page holds it.
CREATE FUNCTION audit_anchor_entry(id text, revision bigint, hash bytea) RETURNS bytea
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
	SELECT int2send(octet_length(convert_to(id, 'UTF8'))::int2) || convert_to(id, 'UTF8') || int8send(revision) || hash
$$;

-- audit_anchor_pack packs each group of anchors (those of one page read
-- and the reviews joining it) into pages of at most 128, in the order of
-- their review IDs: every page of a group of n has n / ceil(n / 128)
-- anchors or one more, so that a page split by new reviews leaves two
-- pages of some 64 rather than one of 128 and one of 1. The writer
-- (api/audit, PGAnchors.Advance) packs with it.
CREATE FUNCTION audit_anchor_pack(groups bigint[], ids text[], revisions bigint[], hashes bytea[], at timestamptz)
RETURNS TABLE (first_id text, anchored_at timestamptz, anchors bytea)
LANGUAGE sql STABLE AS $$
	WITH a AS (
		SELECT g, id COLLATE "C" AS id, rev, hash,
			row_number() OVER (PARTITION BY g ORDER BY id COLLATE "C") - 1 AS i, count(*) OVER (PARTITION BY g) AS n
		FROM unnest(groups, ids, revisions, hashes) AS x(g, id, rev, hash)
	)
	SELECT min(id), at, string_agg(audit_anchor_entry(id, rev, hash), ''::bytea ORDER BY id)
	FROM a
	GROUP BY g, i * ceil(n / 128.0)::bigint / n
$$;

LOCK TABLE audit_anchor IN ACCESS EXCLUSIVE MODE;
INSERT INTO audit_anchor_page (first_id, anchored_at, anchors)
SELECT min(id), max(anchored_at), string_agg(audit_anchor_entry(id, revision, hash_bytes), ''::bytea ORDER BY id)
FROM (SELECT review_id COLLATE "C" AS id, revision, hash_bytes, anchored_at,
	row_number() OVER (ORDER BY review_id COLLATE "C") - 1 AS i FROM audit_anchor) a
GROUP BY i / 128;
DROP TABLE audit_anchor;
-- The reads of a verify are planned from the copy's statistics, not an
-- empty table's.
ANALYZE audit_anchor_page;
