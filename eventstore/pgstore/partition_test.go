package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
	"github.com/reviewledger/reviewledger/eventstore/eventstoretest"
	"github.com/reviewledger/reviewledger/eventstore/pgstore"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// tinyPartitions gives the empty ledger of pool partitions width seqs
// wide from its next seq on, and only the first of them: every later one
// is created when an append finds none (the overflow path).
func tinyPartitions(t *testing.T, pool *pgxpool.Pool, width int) {
	t.Helper()
	ctx := ctxFor(t)
	rows, _ := pool.Query(ctx, `SELECT name FROM event_partition WHERE name <> 'event_p0'`)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	stmts := []string{`UPDATE event_partitioning SET width = ` + fmt.Sprint(width)}
	for _, n := range append(names, "event_p0") {
		stmts = append(stmts, `ALTER TABLE event DETACH PARTITION `+n)
	}
	for _, n := range names {
		stmts = append(stmts, `DROP TABLE `+n)
	}
	stmts = append(stmts, `DO $$ BEGIN EXECUTE format('ALTER TABLE event ATTACH PARTITION event_p0 FOR VALUES FROM (MINVALUE) TO (%s)',
		event_next_seq()); END $$`,
		`SELECT event_partitions_ensure(0)`)
	for _, sql := range stmts {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}

// checkLedger checks what the ledger of pool must hold whatever its
// partitions: each stream's revisions 0 to its head once each, every event
// ID once in its stream. It returns how many partitions hold events.
func checkLedger(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	ctx := context.Background()
	var bad []string
	rows, _ := pool.Query(ctx, `SELECT coalesce(e.stream, h.stream) FROM
			(SELECT stream, count(*) AS n, count(DISTINCT revision) AS d, max(revision) AS last FROM event GROUP BY stream) AS e
			FULL JOIN event_stream h ON h.stream = e.stream
		WHERE e.n IS DISTINCT FROM e.d OR e.n IS DISTINCT FROM e.last + 1 OR e.last IS DISTINCT FROM h.revision`)
	streams, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range streams {
		bad = append(bad, "stream "+s)
	}
	rows, _ = pool.Query(ctx, `SELECT id::text || ' stored twice in ' || stream FROM event GROUP BY stream, id HAVING count(*) > 1`)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		bad = append(bad, "event ID "+id)
	}
	if len(bad) > 0 {
		t.Errorf("the ledger breaks its invariants: %s", strings.Join(bad, "; "))
	}
	return partitionsUsed(t, pool)
}

// partitionsUsed returns how many partitions of the ledger of pool hold
// events.
func partitionsUsed(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var used int
	if err := pool.QueryRow(context.Background(), `SELECT count(DISTINCT tableoid) FROM event`).Scan(&used); err != nil {
		t.Fatal(err)
	}
	return used
}

// TestConformanceTinyPartitions runs the suite on a ledger partitioned
// every 5 seqs, each partition created only when an append finds none, so
// that concurrent appends cross partition boundaries and create
// partitions while they race: expected-version uniqueness, idempotency and
// the gap-free global order must hold as on one partition. After each
// subtest the ledger's invariants are checked, and the concurrent subtests
// must have spanned several partitions.
//
// The gap-free subtests write about 10,000 events in a bound of 20 s: at
// 5 seqs a partition that is 2,000 partitions, each append's plan visits
// every one of them (then the ID check), and the subtest alone took the whole
// bound. They get partitions of 64 seqs: still over a hundred, created
// while their appends race.
func TestConformanceTinyPartitions(t *testing.T) {
	eventstoretest.Run(t, func(t *testing.T) eventstore.Store {
		pool := dbtest.Pool(t)
		width := 5
		if strings.Contains(t.Name(), "GapFree") {
			width = 64
		}
		tinyPartitions(t, pool, width)
		s := pgstore.New(pool, pgstore.Config{})
		t.Cleanup(s.Close)
		t.Cleanup(func() {
			used := checkLedger(t, pool)
			if name := t.Name(); (strings.Contains(name, "Concurrent") || strings.Contains(name, "GapFree")) && used < 2 {
				t.Errorf("%s: events in %d partitions, want the appends to have crossed boundaries", name, used)
			}
		})
		return s
	})
}

// TestEventIDAcrossPartitions: an event ID stored in an older partition is
// still found by an append to its stream whose rows would go to a newer
// one: a repeat is answered with its original result (also with Any, whose
// condition still holds), anything else in the stream is
// ErrDuplicateEventID. Another stream may hold the same ID.
func TestEventIDAcrossPartitions(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	tinyPartitions(t, pool, 10)
	s := pgstore.New(pool, pgstore.Config{})
	t.Cleanup(s.Close)
	ctx := ctxFor(t)

	first := newEvents(2, "First")
	orig := mustAppend(t, s, "s", eventstore.Any, first...)
	for range 25 { // past two boundaries
		mustAppend(t, s, "filler", eventstore.Any, newEvents(1, "Filler")...)
	}
	if got, err := s.Append(ctx, "s", eventstore.Any, first...); err != nil || got != orig {
		t.Fatalf("the same append with Any again: %+v, %v; want the original %+v", got, err, orig)
	}
	if got, err := s.Append(ctx, "s", eventstore.NoStream, first...); err != nil || got != orig {
		t.Fatalf("the same append with NoStream again: %+v, %v; want the original %+v", got, err, orig)
	}
	for name, call := range map[string]func() error{
		"at the stream's end": func() error {
			_, err := s.Append(ctx, "s", eventstore.Exact(1), first[1])
			return err
		},
		"after a new one, with Any": func() error {
			_, err := s.Append(ctx, "s", eventstore.Any, newEvents(1, "New")[0], first[0])
			return err
		},
		"in a multi-stream append": func() error {
			res, err := s.AppendMulti(ctx, eventstore.StreamAppend{Stream: "m", Expected: eventstore.NoStream, Events: newEvents(1, "M")},
				eventstore.StreamAppend{Stream: "s", Expected: eventstore.Any, Events: []eventstore.EventData{newEvents(1, "N")[0], first[1]}})
			if err != nil || res[0].Err != nil {
				return fmt.Errorf("%v, m: %w", err, res[0].Err)
			}
			return res[1].Err
		},
	} {
		if err := call(); !errors.Is(err, eventstore.ErrDuplicateEventID) {
			t.Errorf("an ID of the oldest partition %s: %v, want ErrDuplicateEventID", name, err)
		}
	}
	if res, err := s.Append(ctx, "other", eventstore.NoStream, first[0]); err != nil || res.NextRevision != 0 {
		t.Errorf("an ID of the oldest partition in another stream: %+v, %v; want it written there", res, err)
	}
	if used := checkLedger(t, pool); used < 3 {
		t.Fatalf("events in %d partitions, want 3 or more", used)
	}
}

// TestReadAllMergesThePartitions: ReadAll's plan, on a ledger of three
// partitions of 10,000 events, reads each partition's index on xid from the
// position's xid on, merged in xid order, and sorts only each transaction's
// rows by seq, from the start and from the middle.
func TestReadAllMergesThePartitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	tinyPartitions(t, pool, 10000)
	execAll(t, pool,
		`SELECT event_partitions_ensure(3)`,
		// As appends write them, one transaction each.
		`INSERT INTO event (xid, stream, revision, id, type, data, metadata)
			SELECT (g + 3)::text::xid8, 's-' || (g % 1000), g / 1000, gen_random_uuid(), 'T', '\x7b7d', '' FROM generate_series(0, 29999) AS g`,
		`ANALYZE event`)
	var mid eventstore.Position
	if err := pool.QueryRow(ctx, `SELECT xid::text::bigint, seq FROM event ORDER BY seq OFFSET 15000 LIMIT 1`).Scan(&mid.Commit, &mid.Prepare); err != nil {
		t.Fatal(err)
	}
	conn := planner(t, pool)
	if used := partitionsUsed(t, pool); used != 3 {
		t.Fatalf("events in %d partitions, want 3", used)
	}
	for _, pos := range []eventstore.Position{eventstore.Start, mid} {
		lines := dbtest.Explain(t, conn, pgstore.ReadAllSQL, fmt.Sprint(pos.Commit), int64(pos.Prepare), 500)
		checkMergedScans(t, conn, lines, "Index Scan using {p}_xid_idx on {p} ")
		if text := strings.Join(lines, "\n"); strings.Count(text, "Index Cond: ((xid >= ") < 3 {
			t.Fatalf("plan from %v:\n%s\nwant the position as every scan's index condition", pos, text)
		}
	}
}

// TestDetachWhileAppending detaches the oldest partitions while writers
// append: a detach waits for the transactions that may still read the
// partition (here, one held open), and the writers keep appending all the
// while. Afterwards expected revisions still hold for streams whose early
// events left with the partition, and the global order goes on from the
// newer partitions.
func TestDetachWhileAppending(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	tinyPartitions(t, pool, 20)
	s := pgstore.New(pool, pgstore.Config{})
	t.Cleanup(s.Close)
	ctx := ctxFor(t)

	// A stream to keep, and two streams spread over three partitions and
	// more.
	kept := newEvents(1, "Kept")
	mustAppend(t, s, "keep-me", eventstore.NoStream, kept...)
	for i := range 30 {
		mustAppend(t, s, fmt.Sprintf("old-%d", i%2), eventstore.Any, newEvents(1, "Early")...)
	}
	before := readAll(t, s, eventstore.Start, 31)
	parts, err := pgstore.Partitions(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	var bound int64 // the upper bound of the second partition holding events
	for _, p := range parts {
		if p.Rows > 0 && !p.First && bound == 0 {
			bound = p.Upper
		}
	}
	if bound == 0 {
		t.Fatalf("partitions %+v: want events in two", parts)
	}

	// The streams go on above the bound: refused unless they may be cut.
	// (event_p0, the empty first partition, goes.)
	if first, err := pgstore.Detach(ctx, pool, bound, pgstore.DetachOptions{}); !errors.Is(err, pgstore.ErrStreamsContinue) ||
		!strings.Contains(err.Error(), "event_p1: old-0, old-1") || len(first) != 1 || first[0] != "event_p0" {
		t.Fatalf("detaching the first events of streams that go on: %v after %v, want ErrStreamsContinue naming them after event_p0", err, first)
	}

	// A reader's transaction, open: DETACH … CONCURRENTLY waits for it.
	reader, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Rollback(ctx) //nolint:errcheck // ended below
	if _, err := reader.Exec(ctx, `SET TRANSACTION ISOLATION LEVEL REPEATABLE READ`); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := reader.QueryRow(ctx, `SELECT count(*) FROM event`).Scan(&n); err != nil {
		t.Fatal(err)
	}

	var (
		wg       sync.WaitGroup
		stop     = make(chan struct{})
		appended atomic.Int64
		failed   atomic.Value
	)
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stream := fmt.Sprintf("live-%d", w)
			for next := uint64(0); ; next++ {
				select {
				case <-stop:
					return
				default:
				}
				expected := eventstore.NoStream
				if next > 0 {
					expected = eventstore.Exact(next - 1)
				}
				if _, err := s.Append(ctx, stream, expected, newEvents(1, "Live")...); err != nil {
					failed.Store(err)
					return
				}
				appended.Add(1)
			}
		}()
	}
	detached := make(chan error, 1)
	var names []string
	go func() {
		var err error
		names, err = pgstore.Detach(ctx, pool, bound, pgstore.DetachOptions{Keep: []string{"keep-"}, Cut: true})
		detached <- err
	}()
	// The detach waits for the reader; appends go on meanwhile.
	waitFor(t, pool, `SELECT count(*) > 0 FROM pg_stat_activity WHERE datname = current_database()
		AND query LIKE 'ALTER TABLE event DETACH%' AND wait_event_type = 'Lock'`)
	during := appended.Load()
	for appended.Load() < during+20 {
		if err, _ := failed.Load().(error); err != nil {
			t.Fatalf("an append while the detach waits: %v", err)
		}
		if err := s.WaitForEvents(ctx, eventstore.Start); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-detached:
		t.Fatalf("the detach ended (%v) while a reader could still see the partition", err)
	default:
	}
	if err := reader.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-detached; err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatalf("an append: %v", err)
	}
	if len(names) != 1 || names[0] != "event_p1" {
		t.Fatalf("detached %v, want event_p1", names)
	}
	for _, name := range append(names, "event_p0") {
		var attached bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM event_partition WHERE name = $1)`, name).Scan(&attached); err != nil || attached {
			t.Fatalf("%s still attached (%v)", name, err)
		}
	}

	// The kept stream is whole, in the live partition.
	if got := mustRead(t, s, "keep-me"); len(got) != 1 || got[0].ID != kept[0].ID || got[0].Revision != 0 ||
		string(got[0].Data) != string(kept[0].Data) || got[0].RecordedAt != before[0].RecordedAt || int64(got[0].Position.Prepare) < bound {
		t.Fatalf("the kept stream after the detach: %+v, want %+v as stored, at a new position", got, before[0])
	}
	if _, err := s.Append(ctx, "keep-me", eventstore.NoStream, newEvents(1, "Again")...); !errors.Is(err, eventstore.ErrWrongExpectedVersion) {
		t.Fatalf("keep-me as a new stream: %v, want ErrWrongExpectedVersion", err)
	}

	// Expected revisions hold for the streams whose first events left.
	for i := range 2 {
		stream := fmt.Sprintf("old-%d", i)
		_, err := s.Append(ctx, stream, eventstore.Exact(3), newEvents(1, "Late")...)
		var wev *eventstore.WrongExpectedVersionError
		if !errors.As(err, &wev) || wev.Actual != 14 {
			t.Fatalf("%s at a stale revision: %v, want the stream at revision 14", stream, err)
		}
		if _, err := s.Append(ctx, stream, eventstore.NoStream, newEvents(1, "Late")...); !errors.Is(err, eventstore.ErrWrongExpectedVersion) {
			t.Fatalf("%s as a new stream: %v, want ErrWrongExpectedVersion", stream, err)
		}
		if res := mustAppend(t, s, stream, eventstore.Exact(14), newEvents(1, "Late")...); res.NextRevision != 15 {
			t.Fatalf("%s: appended at revision %d, want 15", stream, res.NextRevision)
		}
	}
	// A reader that was at the last event before the detach goes on from
	// there; one starting over reads only what is still attached.
	last := before[len(before)-1]
	next := readAll(t, s, last.Position, int(appended.Load())+1+2)
	if next[0].Position.Prepare <= last.Position.Prepare {
		t.Fatalf("after the detach, from %v: %d events from %v", last.Position, len(next), next[0].Position)
	}
	from := readAll(t, s, eventstore.Start, 1)
	if len(from) == 0 || int64(from[0].Position.Prepare) < bound {
		t.Fatalf("from the start after the detach: first at seq %d, want at or above %d", from[0].Position.Prepare, bound)
	}
}

// readAll reads the global order after pos up to its end, once it holds
// at least n events (other transactions of the server may hold it back a
// while).
func readAll(t *testing.T, s *pgstore.Store, pos eventstore.Position, n int) []eventstore.RecordedEvent {
	t.Helper()
	ctx := ctxFor(t)
	var all []eventstore.RecordedEvent
	for {
		got, err := s.ReadAll(ctx, pos, 100)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, got...)
		if len(got) > 0 {
			pos = got[len(got)-1].Position
			continue
		}
		if len(all) >= n {
			return all
		}
		if err := s.WaitForEvents(ctx, pos); err != nil {
			t.Fatalf("waiting for %d events, read %d: %v", n, len(all), err)
		}
	}
}

// waitFor polls cond, a query returning one boolean, until it is true.
func waitFor(t *testing.T, pool *pgxpool.Pool, cond string) {
	t.Helper()
	clocktest.Eventually(t, cond, func() bool {
		var ok bool
		if err := pool.QueryRow(t.Context(), cond).Scan(&ok); err != nil {
			t.Fatalf("waiting for %s: %v", cond, err)
		}
		return ok
	})
}

// TestHeadsFollowSQL: events deleted or renumbered by SQL (a repair, or
// tampering for the audit to find) move their streams' heads to the last
// revision still stored, as max(revision) did before the heads: appends go
// on from there, and a stream left with no event is new again.
func TestHeadsFollowSQL(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	s := pgstore.New(pool, pgstore.Config{})
	t.Cleanup(s.Close)
	ctx := ctxFor(t)
	mustAppend(t, s, "cut", eventstore.NoStream, newEvents(5, "E")...)
	mustAppend(t, s, "gone", eventstore.NoStream, newEvents(2, "E")...)
	mustAppend(t, s, "moved", eventstore.NoStream, newEvents(2, "E")...)
	for _, sql := range []string{
		`DELETE FROM event WHERE stream = 'cut' AND revision >= 3`,
		`DELETE FROM event WHERE stream = 'gone'`,
		`UPDATE event SET revision = 7 WHERE stream = 'moved' AND revision = 1`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	if res := mustAppend(t, s, "cut", eventstore.Exact(2), newEvents(1, "E")...); res.NextRevision != 3 {
		t.Fatalf("cut: appended at %d, want 3", res.NextRevision)
	}
	if res := mustAppend(t, s, "gone", eventstore.NoStream, newEvents(1, "E")...); res.NextRevision != 0 {
		t.Fatalf("gone: appended at %d, want 0", res.NextRevision)
	}
	var wev *eventstore.WrongExpectedVersionError
	if _, err := s.Append(ctx, "moved", eventstore.Exact(1), newEvents(1, "E")...); !errors.As(err, &wev) || wev.Actual != 7 {
		t.Fatalf("moved at its old head: %v, want the stream at 7", err)
	}
	checkLedgerHeads(t, pool)
}

// checkLedgerHeads checks that every stream's head is its last revision.
func checkLedgerHeads(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	var bad int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM
			(SELECT stream, max(revision) AS last FROM event GROUP BY stream) AS e
			FULL JOIN event_stream h ON h.stream = e.stream
		WHERE e.last IS DISTINCT FROM h.revision`).Scan(&bad); err != nil || bad != 0 {
		t.Fatalf("%d heads are not their stream's last revision (%v)", bad, err)
	}
}

// TestAppendMultiProbesTheHeads: the multi-stream append finds each
// stream's head by an index probe, never by a scan of every head (an
// EXISTS on the heads was planned
// as a hash of the whole table, made for each call), here with 20,000
// heads and 200 streams at Exact.
func TestAppendMultiProbesTheHeads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	for _, sql := range []string{
		`INSERT INTO event_stream (stream, revision) SELECT 'review-' || g, 3 FROM generate_series(1, 20000) AS g`,
		`ANALYZE event_stream`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	const n = 200
	var (
		streams, ids, types []string
		codes               []int32
		revs, at, ords, cnt []int64
		data                [][]byte
	)
	for i := range n {
		streams = append(streams, fmt.Sprintf("review-%d", 100+i))
		codes, revs, cnt = append(codes, 3), append(revs, 3), append(cnt, 1)
		at, ords = append(at, int64(i+1)), append(ords, 1)
		ids, types, data = append(ids, eventstoretest.NewID()), append(types, "T"), append(data, []byte(`{}`))
	}
	text := strings.Join(dbtest.Explain(t, pool, pgstore.AppendMultiSQL, streams, codes, revs, at, ords, ids, types, data, data, cnt), "\n")
	if strings.Contains(text, "Seq Scan on event_stream") || strings.Contains(text, "hashed SubPlan") ||
		!strings.Contains(text, "Index Only Scan using event_stream_pkey on event_stream") {
		t.Fatalf("the multi-stream append's plan:\n%s\nwant an index probe of the heads, no scan of every head", text)
	}
}
