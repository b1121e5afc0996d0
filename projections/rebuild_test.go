package projections

import (
	"context"
	"regexp"
	"slices"
	"testing"

	"github.com/reviewledger/reviewledger/projections/internal/workload"
)

// TestRebuildKeepsEveryIndex: the new tables are built without their
// secondary indexes, which are created once they are full; after the swap
// every read model table has the indexes its migrations gave it, each with
// the same definition (only the names a rebuild gives them differ).
func TestRebuildKeepsEveryIndex(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.workload(t, workload.Config{Reviews: 120, Seed: 29})
	r := e.runner(t, nil)
	before := indexShapes(t, e)
	if len(before) == 0 {
		t.Fatal("no indexes on the read model tables")
	}
	for range 2 { // a rebuild of rebuilt tables too
		if _, err := r.Rebuild(ctx); err != nil {
			t.Fatal(err)
		}
		if after := indexShapes(t, e); !slices.Equal(after, before) {
			t.Fatalf("indexes after a rebuild:\n%q\nwant, as migrated:\n%q", after, before)
		}
	}
	var leftover int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relname LIKE '%\_rebuild' OR relname LIKE '%\_old'`).Scan(&leftover); err != nil {
		t.Fatal(err)
	}
	if leftover != 0 {
		t.Errorf("%d new or old tables left after the swaps", leftover)
	}
}

// indexShapes lists the indexes of every projection table as "table:
// definition", the index's own name left out, sorted.
func indexShapes(t *testing.T, e *env) []string {
	t.Helper()
	var tables []string
	for _, p := range all() {
		tables = append(tables, p.tables()...)
	}
	rows, err := e.pool.Query(context.Background(), `SELECT c.relname, pg_get_indexdef(i.indexrelid) FROM pg_index i
		JOIN pg_class c ON c.oid = i.indrelid WHERE c.relname = ANY($1) AND c.relkind = 'r'`, tables)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	name := regexp.MustCompile(`^CREATE (UNIQUE )?INDEX \S+ ON `)
	var out []string
	for rows.Next() {
		var table, def string
		if err := rows.Scan(&table, &def); err != nil {
			t.Fatal(err)
		}
		out = append(out, table+": "+name.ReplaceAllString(def, "CREATE ${1}INDEX ON "))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}
