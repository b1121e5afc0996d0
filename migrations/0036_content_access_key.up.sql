-- content_access is read by review (content_access_review) and by time
-- range, the export (contentaccess.Between: at >= $1 AND at < $2 ORDER BY
-- at, id), never by its id alone: its primary key becomes (at, id), which
-- serves the export, and the index on (at, id) that repeated it goes
-- (docs/architecture.md, "Indexes and the queries they serve"). The
-- new key is built under the table's ACCESS EXCLUSIVE lock: reads of
-- content (each recorded here) and of the accesses wait for it, and it
-- waits for an export under way (docs/operations.md, "Deploy").
ALTER TABLE content_access DROP CONSTRAINT content_access_pkey;
DROP INDEX content_access_at;
ALTER TABLE content_access ADD CONSTRAINT content_access_pkey PRIMARY KEY (at, id);
