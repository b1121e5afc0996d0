package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/pgstore"
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
	if n := partitionsOf(t, pool); n < 4 {
		t.Fatalf("%d partitions, want 4 or more", n)
	}
	if got := idIndexes(t, pool); len(got) > 0 {
		t.Fatalf("indexes on id: %v, want none", got)
	}
}

// TestIDCheckReadsTheStreams: the check of an append's IDs after its insert
// (event_ids_twice, inlined into the plan) reads the streams' rows through
// each partition's index by stream, here on 20,000 events of 5,000 streams
// in two partitions and more, not every event.
func TestIDCheckReadsTheStreams(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	tinyPartitions(t, pool, 10000)
	execAll(t, pool,
		`SELECT event_partitions_ensure(2)`,
		`INSERT INTO event (stream, revision, id, type, data, metadata)
			SELECT 'review-' || (g % 5000), g / 5000, gen_random_uuid(), 'T', '\x7b7d', '' FROM generate_series(0, 19999) AS g`,
		`ANALYZE event`)
	if used := partitionsUsed(t, pool); used < 2 {
		t.Fatalf("events in %d partitions, want 2 or more", used)
	}
	text := strings.Join(dbtest.Explain(t, planner(t, pool), `SELECT * FROM event_ids_twice($1::text[])`, []string{"review-7", "review-4242"}), "\n")
	if strings.Contains(text, "Seq Scan") || strings.Count(text, "_stream_idx") < partitionsOf(t, pool) {
		t.Fatalf("the check of the IDs' plan:\n%s\nwant each partition's index by stream, no scan", text)
	}
}

// TestIDCheckIgnoresRepeatsOfOthers: a repeat of an ID already stored in a
// stream, written by another transaction (as the copy a detach makes of the
// streams it keeps), stops no later append to it; an append that repeats
// an ID of the stream itself is still refused.
func TestIDCheckIgnoresRepeatsOfOthers(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	s := pgstore.New(pool, pgstore.Config{})
	t.Cleanup(s.Close)
	ctx := ctxFor(t)
	first := newEvents(1, "First")
	mustAppend(t, s, "kept", eventstore.NoStream, first...)
	// As pgstore.Detach keeps a stream: its events copied as they are,
	// the head left alone.
	execAll(t, pool, `INSERT INTO event (stream, revision, id, type, data, metadata)
		SELECT stream, revision, id, type, data, metadata FROM event WHERE stream = 'kept'`)
	res, err := s.Append(ctx, "kept", eventstore.Exact(0), newEvents(1, "Later")...)
	if err != nil || res.NextRevision != 1 {
		t.Fatalf("an append after a repeat stored by another: %+v, %v; want it at revision 1", res, err)
	}
	if _, err := s.Append(ctx, "kept", eventstore.Exact(1), first...); !errors.Is(err, eventstore.ErrDuplicateEventID) {
		t.Fatalf("an append repeating an ID of the stream: %v, want ErrDuplicateEventID", err)
	}
}

// partitionsOf returns how many partitions the ledger of pool has.
func partitionsOf(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM event_partition`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
