-- review_work_owner_idx is dropped: every query naming an owner also names
-- the reviews (the primary key finds them), except a process's release of
-- all it holds as it stops, which reads the table once. The index cost every
-- submission an index entry and every take, park and release an index
-- update, on the hot path of every review (docs/benchmarks.md).
--
-- DROP INDEX locks review_work exclusively until the migration commits, and
-- waits for any transaction using the table; every statement on the table
-- would queue behind it meanwhile. So it waits at most 10 s: when another
-- process keeps the table busy that long, the migration fails (the process
-- starting stops with the error, nothing changed) and is tried again at the
-- next start.
SET LOCAL lock_timeout = '10s';
DROP INDEX IF EXISTS review_work_owner_idx;
