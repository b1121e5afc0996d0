package migrations_test

import (
	"context"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/reviewledger/reviewledger/migrations"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// indexSection is the part of docs/architecture.md that names every
// index of the schema with the statements it serves.
const indexSection = "## Indexes and the queries they serve"

// TestEveryIndexIsDocumented: every index of a database migrated from
// nothing is named in docs/architecture.md, "Indexes and the queries they
// serve", with the statements it serves, and the section names no index
// the schema lacks. The partitions' indexes are named once, for a
// partition event_pN.
func TestEveryIndexIsDocumented(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	rows, err := pool.Query(context.Background(), `SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()`)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	partition := regexp.MustCompile(`^event_p\d+_`)
	var schema []string
	for _, name := range names {
		schema = append(schema, partition.ReplaceAllString(name, "event_pN_"))
	}
	slices.Sort(schema)
	schema = slices.Compact(schema)

	documented := documentedIndexes(t)
	for _, name := range schema {
		if !slices.Contains(documented, name) {
			t.Errorf("index %s is not in docs/architecture.md, %q: name the statements it serves there", name, indexSection)
		}
	}
	for _, name := range documented {
		if !slices.Contains(schema, name) {
			t.Errorf("docs/architecture.md, %q, names index %s, which a migrated database does not have", indexSection, name)
		}
	}
	if len(schema) < 40 {
		t.Fatalf("%d indexes in the migrated schema: the query found too few to check (%q)", len(schema), schema)
	}
}

// documentedIndexes returns the names in the first column of the
// section's table: one or more `name`s a row.
func documentedIndexes(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile("../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(raw), "\n"+indexSection+"\n")
	if !ok {
		t.Fatalf("docs/architecture.md has no section %q", indexSection)
	}
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	name := regexp.MustCompile("`([a-z0-9_N]+)`")
	var out []string
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || strings.TrimSpace(cells[1]) == "index" || strings.HasPrefix(strings.TrimSpace(cells[1]), "---") {
			continue
		}
		for _, m := range name.FindAllStringSubmatch(cells[1], -1) {
			out = append(out, m[1])
		}
	}
	if len(out) == 0 {
		t.Fatalf("docs/architecture.md, %q: no table of indexes", indexSection)
	}
	return out
}

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
	rows, err := tx.Query(ctx, `EXPLAIN SELECT review_id FROM content_access WHERE at >= $1 AND at < $2 ORDER BY at, id`,
		"2026-12-07 10:01Z", "2026-12-07 10:02Z")
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if plan := strings.Join(lines, "\n"); !strings.Contains(plan, "Index Scan using content_access_pkey") || strings.Contains(plan, "Sort") {
		t.Errorf("the export's plan does not read the key in its order:\n%s", plan)
	}
	var exists bool
	if err := db.QueryRow(ctx, `SELECT to_regclass('content_access_at') IS NOT NULL`).Scan(&exists); err != nil || exists {
		t.Errorf("content_access_at left in place (%v)", err)
	}
}
