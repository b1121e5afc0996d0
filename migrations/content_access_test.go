package migrations_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/reviewledger/reviewledger/migrations"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// TestContentAccessKeyedByTime: on a database of the release before
// (every migration applied but 0036, whose number is below theirs), the
// migrator applies 0036 alone; it keeps every access and keys the table
// by (at, id), which the export of a time range reads in its order; the
// index that repeated that key is gone.
func TestContentAccessKeyedByTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.EmptySchema(t, "access")
	if _, err := migrations.Apply(ctx, db); err != nil {
		t.Fatal(err)
	}
	// Back to the release before: 0036 undone and not recorded.
	if _, err := db.Exec(ctx, `ALTER TABLE content_access DROP CONSTRAINT content_access_pkey;
		ALTER TABLE content_access ADD PRIMARY KEY (id);
		CREATE INDEX content_access_at ON content_access (at, id);
		DELETE FROM reviewledger_migration WHERE version = 36`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `INSERT INTO content_access (review_id, at, subject, display_name, actor, role, via, credential, request_id, outcome)
		SELECT 'r-' || i % 7, '2026-12-07 10:00Z'::timestamptz + i * interval '1 second', 's', 'S', 'a', 'moderator', 'token', 'c', 'q', 'served'
		FROM generate_series(1, 500) i`); err != nil {
		t.Fatal(err)
	}
	if applied, err := migrations.Apply(ctx, db); err != nil || !slices.Equal(applied, []int{36}) {
		t.Fatalf("the upgrade applied %v (%v), want [36]", applied, err)
	}
	var n int
	var key string
	if err := db.QueryRow(ctx, `SELECT (SELECT count(*) FROM content_access),
		(SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = 'content_access'::regclass AND contype = 'p')`).Scan(&n, &key); err != nil {
		t.Fatal(err)
	}
	if n != 500 || key != "PRIMARY KEY (at, id)" {
		t.Errorf("%d accesses, key %q; want 500, PRIMARY KEY (at, id)", n, key)
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off`); err != nil {
		t.Fatal(err)
	}
	lines := dbtest.Explain(t, tx, `SELECT review_id FROM content_access WHERE at >= $1 AND at < $2 ORDER BY at, id`,
		"2026-12-07 10:01Z", "2026-12-07 10:02Z")
	if plan := strings.Join(lines, "\n"); !strings.Contains(plan, "Index Scan using content_access_pkey") || strings.Contains(plan, "Sort") {
		t.Errorf("the export's plan does not read the key in its order:\n%s", plan)
	}
	var exists bool
	if err := db.QueryRow(ctx, `SELECT to_regclass('content_access_at') IS NOT NULL`).Scan(&exists); err != nil || exists {
		t.Errorf("content_access_at left in place (%v)", err)
	}
}
