package pgstore_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/pgstore"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// orderIndexes returns, for each partition of the ledger of pool, the
// definitions of its indexes of the global order: the plain one on xid of
// migration 0006 ("<p>_xid_idx") and the primary key (xid, seq) of 0001
// ("<p>_pkey").
func orderIndexes(t *testing.T, pool *pgxpool.Pool) map[string]string {
	t.Helper()
	return partitionIndexes(t, pool, "_pkey", "_xid_idx")
}

// xidIndex is the definition of 0006's index of partition p; primaryKey
// that of the primary key of 0001.
func xidIndex(p string) string {
	return "CREATE INDEX " + p + "_xid_idx ON " + p + " USING btree (xid)"
}

func primaryKey(p string) string {
	return "CREATE UNIQUE INDEX " + p + "_pkey ON " + p + " USING btree (xid, seq)"
}

// hasPrimaryKey reports whether the ledger's parent table has one.
func hasPrimaryKey(t *testing.T, pool *pgxpool.Pool) bool {
	t.Helper()
	var keyed bool
	if err := pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_constraint
		WHERE conrelid = 'event'::regclass AND contype = 'p')`).Scan(&keyed); err != nil {
		t.Fatal(err)
	}
	return keyed
}

// checkOrderIndexes checks that every partition indexes the global order
// by want(p) alone.
func checkOrderIndexes(t *testing.T, pool *pgxpool.Pool, want func(p string) string) {
	t.Helper()
	indexes := orderIndexes(t, pool)
	if len(indexes) == 0 {
		t.Fatal("no partitions")
	}
	for p, def := range indexes {
		if def != want(p) {
			t.Errorf("partition %s indexes the global order by %q, want %q", p, def, want(p))
		}
	}
}

// TestPartitionsIndexTheirXid: a new ledger has no primary key; every
// partition, including those created later, indexes xid alone; and on rows
// written as group commit writes them (a hundred events a transaction),
// B-tree deduplication keeps that index at most a quarter of the (xid,
// seq) primary key it replaces, built on the same rows.
func TestPartitionsIndexTheirXid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	if hasPrimaryKey(t, pool) {
		t.Fatal("a new ledger has a primary key, want none (migration 0006)")
	}
	tinyPartitions(t, pool, 30000)
	execAll(t, pool,
		`SELECT event_partitions_ensure(3)`,
		`INSERT INTO event (xid, stream, revision, id, type, data, metadata)
			SELECT (g / 100 + 3)::text::xid8, 'review-' || g, 0, gen_random_uuid(), 'T', '\x7b7d', ''
			FROM generate_series(0, 29999) AS g`,
		`SELECT event_partitions_ensure(3)`)
	checkOrderIndexes(t, pool, xidIndex)
	if used := partitionsUsed(t, pool); used != 1 {
		t.Fatalf("events in %d partitions, want 1", used)
	}

	var part string
	if err := pool.QueryRow(ctx, `SELECT tableoid::regclass::text FROM event LIMIT 1`).Scan(&part); err != nil {
		t.Fatal(err)
	}
	var plain, keyed int64
	if err := pool.QueryRow(ctx, `SELECT pg_relation_size($1::regclass)`, part+"_xid_idx").Scan(&plain); err != nil {
		t.Fatal(err)
	}
	execAll(t, pool, `CREATE UNIQUE INDEX before_0006 ON `+part+` (xid, seq)`)
	if err := pool.QueryRow(ctx, `SELECT pg_relation_size('before_0006')`).Scan(&keyed); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: index on xid %d bytes, (xid, seq) %d", part, plain, keyed)
	if plain*4 > keyed {
		t.Errorf("%s's index on xid is %d bytes, (xid, seq) %d: want it at most a quarter of it (deduplicated)", part, plain, keyed)
	}
}

// TestConvertAnExistingLedgerOnline runs the statements of
// docs/operations.md, "Upgrading to the index on xid", on a ledger that
// held events when 0006 ran (and so kept its primary key): each
// partition's index on xid built concurrently; the check of step 2, which
// lists the partitions created since (without the index) until step 1
// runs again; the primary key dropped under the partitions' lock; step 1
// again for the partitions created after the check (with a primary key,
// which went with the parent's). Every partition then indexes xid alone,
// including those created afterwards, and the ledger reads as it did.
func TestConvertAnExistingLedgerOnline(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	pool := dbtest.Pool(t)
	// As a ledger upgraded with events stored: the primary key of 0001.
	execAll(t, pool,
		`DO $$
		DECLARE p text;
		BEGIN
			FOR p IN SELECT name FROM event_partition LOOP
				EXECUTE format('DROP INDEX %I', p || '_xid_idx');
			END LOOP;
		END $$`,
		`ALTER TABLE event ADD CONSTRAINT event_pkey PRIMARY KEY (xid, seq)`)
	tinyPartitions(t, pool, 100)
	s := pgstore.New(pool, pgstore.Config{})
	t.Cleanup(s.Close)
	write := func(from int) {
		for i := range 50 {
			mustAppend(t, s, fmt.Sprintf("review-%d", from+i), eventstore.NoStream, newEvents(3, "T")...)
		}
	}
	write(0)
	checkOrderIndexes(t, pool, primaryKey)
	before := readAll(t, s, eventstore.Start, 150)

	names := func(sql string) []string {
		t.Helper()
		rows, _ := pool.Query(ctx, sql)
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	step1 := func() {
		t.Helper()
		for _, stmt := range names(`SELECT format('CREATE INDEX CONCURRENTLY IF NOT EXISTS %I ON %I (xid)', name || '_xid_idx', name)
			FROM event_partition WHERE NOT detaching`) {
			execAll(t, pool, stmt)
		}
	}
	step2 := func() []string {
		t.Helper()
		return names(`SELECT p.name FROM event_partition p
			WHERE NOT p.detaching AND NOT EXISTS (SELECT 1 FROM pg_index i
				WHERE i.indexrelid = to_regclass(p.name || '_xid_idx') AND i.indisvalid)`)
	}
	step1()
	if missing := step2(); len(missing) != 0 {
		t.Fatalf("step 2 lists %v right after step 1, want none", missing)
	}
	execAll(t, pool, `SELECT event_partitions_ensure(5)`) // as appends would, meanwhile
	if missing := step2(); len(missing) == 0 {
		t.Fatal("step 2 lists none of the partitions created after step 1")
	}
	step1()
	if missing := step2(); len(missing) != 0 {
		t.Fatalf("step 2 lists %v after step 1 ran again, want none", missing)
	}
	execAll(t, pool, `SELECT event_partitions_ensure(8)`)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{`SET LOCAL lock_timeout = '2s'`, `SELECT pg_advisory_xact_lock(x'726c706172746e73'::bigint)`,
		`ALTER TABLE event DROP CONSTRAINT event_pkey`} {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	step1()
	checkOrderIndexes(t, pool, xidIndex)

	write(50)
	checkOrderIndexes(t, pool, xidIndex)
	after := readAll(t, s, eventstore.Start, 300)
	if !reflect.DeepEqual(after[:len(before)], before) {
		t.Fatal("after the conversion ReadAll does not give the events before it as they were")
	}
	if used := checkLedger(t, pool); used < 3 {
		t.Fatalf("events in %d partitions, want at least 3", used)
	}
}
