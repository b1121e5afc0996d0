-- review_work_owner_idx is dropped: every query naming an owner also names
-- the reviews (the primary key finds them), except a process's release of
-- all it holds as it stops, which reads the table once. The index cost every
-- submission an index entry and every take, park and release an index
-- update, on the hot path of every review (docs/benchmarks.md).
DROP INDEX IF EXISTS review_work_owner_idx;
