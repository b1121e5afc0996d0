package audit

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// TestChunkMarksReadTheKey: in the plan PostgreSQL keeps for any argument
// (the one it settles on after five runs of a prepared statement), the
// marks of a chunk of reviews are read through the witness's key, a span
// of it or each review looked up, never by comparing every row scanned
// with every ID asked for: with = ANY that took 381 s instead of 8 for a
// verify of 605,440 reviews.
func TestChunkMarksReadTheKey(t *testing.T) {
	ctx := context.Background()
	conn, err := dbtest.Pool(t).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, sql := range []string{
		`INSERT INTO audit_anchor (review_id, revision, hash_bytes, anchored_at) SELECT 'r' || g, 1, sha256(g::text::bytea), now() FROM generate_series(1, 5000) g`,
		`INSERT INTO review_summary (review_id, content_class, state, attempts, version, submitted_at, deadline, human_gate, updated_at)
			SELECT 'r' || g, 'caption_suggestion', 'accepted', 1, 3, now(), now(), false, now() FROM generate_series(1, 5000) g`,
		`ANALYZE audit_anchor, review_summary`,
		`SET plan_cache_mode = force_generic_plan`,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	for table, q := range map[string]markQueries{"audit_anchor": anchorMarks, "review_summary": summaryMarks} {
		for kind, sql := range map[string]string{"lookup": q.lookup, "span": q.span} {
			name := kind + "_" + table
			if _, err := conn.Exec(ctx, `PREPARE `+name+` AS `+sql); err != nil {
				t.Fatal(err)
			}
			rows, _ := conn.Query(ctx, `EXPLAIN (COSTS OFF) EXECUTE `+name+`('{r1,r2,r3}')`)
			lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			plan := strings.Join(lines, "\n")
			if !strings.Contains(plan, "Index Scan using "+table+"_pkey") && !strings.Contains(plan, "Bitmap Index Scan on "+table+"_pkey") || strings.Contains(plan, "Seq Scan") || strings.Contains(plan, "ANY") {
				t.Errorf("%s of %s, the plan for any argument:\n%s\nwant the reviews read through %s_pkey", kind, table, plan, table)
			}
		}
	}
}
