package migrations_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/migrations"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// TestPendingIndexDropped: 0050 drops the partial index on review_summary,
// also when a rebuild renamed it, and leaves the other indexes alone.
func TestPendingIndexDropped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	if _, err := pool.Exec(ctx, `CREATE SCHEMA fresh`); err != nil {
		t.Fatal(err)
	}
	cfg := pool.Config().Copy()
	cfg.ConnConfig.RuntimeParams["search_path"] = "fresh"
	fresh, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fresh.Close)

	all, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	exec := func(m migrations.Migration) {
		t.Helper()
		if _, err := fresh.Exec(ctx, m.SQL); err != nil {
			t.Fatalf("%04d_%s: %v", m.Version, m.Name, err)
		}
	}
	found := false
	for _, m := range all {
		if m.Version == 50 {
			// As a rebuild leaves it: the same index under a generated name.
			if _, err := fresh.Exec(ctx, `ALTER INDEX review_summary_pending RENAME TO review_summary_deadline_review_id_idx`); err != nil {
				t.Fatal(err)
			}
			found = true
		}
		exec(m)
	}
	if !found {
		t.Fatalf("no migration 0050 among %d", len(all))
	}
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
