package migrations_test

import (
	"context"
	"strings"
	"testing"

	"github.com/reviewledger/reviewledger/migrations"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// TestPendingIndexDropped: 0050 drops the partial index on review_summary,
// also when a rebuild renamed it, and leaves the other indexes alone.
func TestPendingIndexDropped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fresh := dbtest.EmptySchema(t, "fresh")
	dbtest.Apply(t, fresh, func(m migrations.Migration) bool { return m.Version < 50 })
	// As a rebuild leaves it: the same index under a generated name.
	if _, err := fresh.Exec(ctx, `ALTER INDEX review_summary_pending RENAME TO review_summary_deadline_review_id_idx`); err != nil {
		t.Fatal(err)
	}
	if n := dbtest.Apply(t, fresh, func(m migrations.Migration) bool { return m.Version == 50 }); n != 1 {
		t.Fatalf("%d migrations 0050, want 1", n)
	}
	dbtest.Apply(t, fresh, func(m migrations.Migration) bool { return m.Version > 50 })
	rows, _ := fresh.Query(ctx, `SELECT indexrelid::regclass::text, indpred IS NOT NULL FROM pg_index
		WHERE indrelid = 'review_summary'::regclass`)
	var names []string
	for rows.Next() {
		var (
			name    string
			partial bool
		)
		if err := rows.Scan(&name, &partial); err != nil {
			t.Fatal(err)
		}
		if partial {
			t.Errorf("partial index %s left on review_summary", name)
		}
		names = append(names, name)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(names) != 1 || !strings.Contains(names[0], "pkey") {
		t.Errorf("review_summary indexes %v, want only its primary key", names)
	}
}
