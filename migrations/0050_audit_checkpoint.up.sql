-- review_summary_pending served a query for pending reviews that nothing
-- runs (the runner keeps its own runner_pending table). A rebuild of
-- review_summary copies its indexes under generated names, so every partial
-- index on the live table is dropped, whatever it is called now.
DO $$
DECLARE
	idx regclass;
BEGIN
	FOR idx IN
		SELECT i.indexrelid::regclass FROM pg_index i
		WHERE i.indrelid = 'review_summary'::regclass AND i.indpred IS NOT NULL
	LOOP
		EXECUTE 'DROP INDEX ' || idx::text;
	END LOOP;
END
$$;
