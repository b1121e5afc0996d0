-- Bytes on disk per review, every table and index of the schema counted:
-- run with psql on a database a load left behind, e.g.
--
--   createdb rl_storage
--   go run ./api/internal/loadgen -reviews 2000 -database postgres:///rl_storage
--   psql -d rl_storage -f api/internal/loadgen/storage.sql
--
-- "content" is review_payload and its indexes (the reviewed bytes); every
-- other relation is the ledger (event's partitions and the stream heads,
-- event_stream), the engine's work records and the read models. docs/benchmarks.md ("Storage per review") records the figures.
\set QUIET on
VACUUM ANALYZE;
\set QUIET off
CREATE TEMP VIEW rel AS
	SELECT c.relname, c.relkind, pg_relation_size(c.oid) AS bytes,
		-- a partition of event, and its indexes, count as event
		coalesce(pg_partition_root(coalesce(t.oid, c.oid))::text, t.relname, c.relname) AS tbl
	FROM pg_class c
	JOIN pg_namespace s ON s.oid = c.relnamespace
	LEFT JOIN pg_index i ON i.indexrelid = c.oid
	LEFT JOIN pg_class t ON t.oid = i.indrelid
	WHERE s.nspname = current_schema() AND c.relkind IN ('r', 'i', 'p', 'm', 't');
CREATE TEMP VIEW n AS
	SELECT count(*)::numeric AS reviews FROM event WHERE type = 'Submitted' AND stream LIKE 'review-%';

SELECT n.reviews,
	round((SELECT count(*) FROM event) / n.reviews, 2) AS events_per_review,
	round((SELECT sum(bytes) FROM rel) / n.reviews) AS bytes_per_review,
	round((SELECT sum(bytes) FROM rel WHERE tbl <> 'review_payload') / n.reviews) AS excluding_content,
	round((SELECT sum(bytes) FROM rel WHERE tbl IN ('event', 'event_stream')) / n.reviews) AS ledger_with_indexes
FROM n;

SELECT relname, CASE relkind WHEN 'i' THEN 'index' ELSE 'table' END AS kind, bytes,
	round(bytes / (SELECT reviews FROM n)) AS per_review
FROM rel WHERE bytes > 0 ORDER BY bytes DESC, relname;

SELECT type, count(*) AS events, round(avg(pg_column_size(data))) AS data_bytes,
	round(avg(pg_column_size(metadata))) AS metadata_bytes
FROM event GROUP BY type ORDER BY count(*) DESC, type;
