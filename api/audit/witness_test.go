package audit_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/reviewledger/reviewledger/api/audit"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// TestWitnessMarksOfManyAndOfFew: the PostgreSQL witnesses give the marks
// of exactly the reviews asked for, whether few (each looked up) or many
// (read as a span of the key, rows in it not asked for left out), and of
// every review for nil.
func TestWitnessMarksOfManyAndOfFew(t *testing.T) {
	ctx := context.Background()
	pool := dbtest.Pool(t)
	for _, sql := range []string{
		`INSERT INTO audit_anchor (review_id, revision, hash, anchored_at) SELECT format('r%s', lpad(g::text, 4, '0')), g, 'h' || g, now() FROM generate_series(0, 2999) g`,
		`INSERT INTO review_summary (review_id, content_class, state, attempts, version, submitted_at, deadline, human_gate, updated_at)
			SELECT format('r%s', lpad(g::text, 4, '0')), 'caption_suggestion', 'accepted', 1, g, now(), now(), false, now() FROM generate_series(0, 2999) g`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	// Every other review from r0500 to r2998 (1,250, read as a span), and
	// one that no witness knows; then three (looked up).
	var many []string
	for i := 500; i < 3000; i += 2 {
		many = append(many, fmt.Sprintf("r%04d", i))
	}
	many = append(many, "r1001x")
	few := []string{"r0007", "r2999", "nowhere"}
	for _, w := range []audit.Witness{audit.PGAnchors{Pool: pool}, audit.PGSummaries{Pool: pool}} {
		for _, ids := range [][]string{many, few} {
			got, err := w.Marks(ctx, ids)
			if err != nil {
				t.Fatal(err)
			}
			known := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == "r1001x" || id == "nowhere" })
			if keys := slices.Sorted(maps.Keys(got)); !slices.Equal(keys, known) {
				t.Fatalf("%s: marks of %d reviews asked for (%d known): got %d: %v", w.Name(), len(ids), len(known), len(keys), keys)
			}
			var rev uint64
			if _, err := fmt.Sscanf(known[0], "r%d", &rev); err != nil || got[known[0]].Revision != rev {
				t.Fatalf("%s: mark of %s: %+v", w.Name(), known[0], got[known[0]])
			}
		}
		all, err := w.Marks(ctx, nil)
		if err != nil || len(all) != 3000 {
			t.Fatalf("%s: marks of every review: %d, %v; want 3000", w.Name(), len(all), err)
		}
	}
}
