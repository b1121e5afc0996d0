package pgstore_test

import (
	"context"
	"crypto/md5"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/eventstore/pgstore"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// streamIndexes returns, for each partition of the ledger of pool, the
// definition of its index by stream: the plain one of migration 0005
// ("<p>_stream_idx") or the unique (stream, revision) of 0001; a
// partition with both or neither is reported as such.
func streamIndexes(t *testing.T, pool *pgxpool.Pool) map[string]string {
	t.Helper()
	return partitionIndexes(t, pool, "_stream_idx", "_stream_revision_key")
}

// partitionIndexes returns, for each partition p of the ledger of pool,
// the definitions (without the schema) of its indexes named p followed by
// one of suffixes, joined by "; " in name order, or "none".
func partitionIndexes(t *testing.T, pool *pgxpool.Pool, suffixes ...string) map[string]string {
	t.Helper()
	rows, _ := pool.Query(context.Background(), `SELECT p.name,
			coalesce(string_agg(regexp_replace(pg_get_indexdef(i.indexrelid), ' ON \S+\.', ' ON '), '; '
			ORDER BY i.indexrelid::regclass::text), 'none')
		FROM event_partition p
		LEFT JOIN pg_index i ON i.indrelid = p.name::regclass
			AND i.indexrelid::regclass::text IN (SELECT p.name || s FROM unnest($1::text[]) AS s)
		GROUP BY p.name`, suffixes)
	got := map[string]string{}
	var name, def string
	if _, err := pgx.ForEachRow(rows, []any{&name, &def}, func() error {
		got[name] = def
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

// plainStreamIndex is the definition of 0005's index of partition p.
func plainStreamIndex(p string) string {
	return "CREATE INDEX " + p + "_stream_idx ON " + p + " USING btree (stream)"
}

// TestPartitionsIndexStreamsPlainly: every partition of a new ledger, and
// each one created later, indexes its rows by stream alone, not unique; a
// stream's read uses that index in every partition; and B-tree
// deduplication makes it smaller than the (stream, revision) index it
// replaces on the same rows (a review's events share one key).
func TestPartitionsIndexStreamsPlainly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	tinyPartitions(t, pool, 3000)
	execAll(t, pool,
		`SELECT event_partitions_ensure(3)`,
		`INSERT INTO event (stream, revision, id, type, data, metadata)
			SELECT 'review-' || md5((g / 3)::text), g % 3, gen_random_uuid(), 'T', '\x7b7d', ''
			FROM generate_series(0, 8999) AS g`,
		`ANALYZE event`)
	indexes := streamIndexes(t, pool)
	if len(indexes) < 4 {
		t.Fatalf("partitions %v, want at least 4", indexes)
	}
	for p, def := range indexes {
		if def != plainStreamIndex(p) {
			t.Errorf("partition %s indexes its streams by %q, want %q", p, def, plainStreamIndex(p))
		}
	}
	if used := partitionsUsed(t, pool); used != 3 {
		t.Fatalf("events in %d partitions, want 3", used)
	}

	conn := planner(t, pool)
	plan := strings.Join(dbtest.Explain(t, conn, pgstore.ReadStreamSQL, fmt.Sprintf("review-%x", md5.Sum([]byte("7"))), int64(1)), "\n")
	for p := range indexes {
		if !strings.Contains(plan, "on "+p+"_stream_idx") && !strings.Contains(plan, "using "+p+"_stream_idx") {
			t.Errorf("plan:\n%s\nreads partition %s without its index by stream", plan, p)
		}
	}

	// The same rows indexed as before 0005.
	var part string
	if err := pool.QueryRow(ctx, `SELECT tableoid::regclass::text FROM event GROUP BY 1 ORDER BY count(*) DESC LIMIT 1`).Scan(&part); err != nil {
		t.Fatal(err)
	}
	var plain, unique int64
	if err := pool.QueryRow(ctx, `SELECT pg_relation_size($1::regclass)`, part+"_stream_idx").Scan(&plain); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE UNIQUE INDEX before_0005 ON `+part+` (stream, revision)`); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT pg_relation_size('before_0005')`).Scan(&unique); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: index by stream %d bytes, (stream, revision) %d", part, plain, unique)
	if plain*4 > unique*3 {
		t.Errorf("%s's index by stream is %d bytes, (stream, revision) %d: want it at most three quarters of it (deduplicated)", part, plain, unique)
	}
}
