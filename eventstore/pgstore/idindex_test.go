package pgstore_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// idIndexes returns the indexes of the ledger's partitions that hold the
// column id, as "partition: index".
func idIndexes(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, _ := pool.Query(context.Background(), `SELECT p.name || ': ' || i.indexrelid::regclass::text
		FROM event_partition p
		JOIN pg_index i ON i.indrelid = p.name::regclass
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attname = 'id' AND a.attnum = ANY(i.indkey)
		ORDER BY 1`)
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestNoPartitionIndexesID: an event ID is unique within its stream only
// (migration 0007), so no partition of the ledger keeps an index on id,
// the ones created since included.
func TestNoPartitionIndexesID(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	execAll(t, pool, `SELECT event_partitions_ensure(4)`)
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM event_partition`).Scan(&n); err != nil || n < 4 {
		t.Fatalf("%d partitions (%v), want 4 or more", n, err)
	}
	if got := idIndexes(t, pool); len(got) > 0 {
		t.Fatalf("indexes on id: %v, want none", got)
	}
}
