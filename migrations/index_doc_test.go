package migrations_test

import (
	"context"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

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
	seen := map[string]bool{}
	for _, name := range documented {
		if seen[name] {
			t.Errorf("docs/architecture.md, %q, names index %s twice: one row an index", indexSection, name)
		}
		seen[name] = true
	}
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
