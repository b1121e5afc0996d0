package pgstore_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/eventstoretest"
	"github.com/reviewledger/reviewledger/eventstore/pgstore"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

func newEvents(n int, typ string) []eventstore.EventData {
	out := make([]eventstore.EventData, n)
	for i := range out {
		out[i] = eventstore.EventData{ID: eventstoretest.NewID(), Type: typ, Data: []byte(`{}`), Metadata: []byte(`{"schema":1}`)}
	}
	return out
}

func ctxFor(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustAppend(t *testing.T, s *pgstore.Store, stream string, expected eventstore.ExpectedRevision, evs ...eventstore.EventData) eventstore.AppendResult {
	t.Helper()
	res, err := s.Append(ctxFor(t), stream, expected, evs...)
	if err != nil {
		t.Fatalf("append to %s: %v", stream, err)
	}
	return res
}

func mustRead(t *testing.T, s *pgstore.Store, stream string) []eventstore.RecordedEvent {
	t.Helper()
	got, err := s.ReadStream(ctxFor(t), stream, 0)
	if err != nil {
		t.Fatalf("read %s: %v", stream, err)
	}
	return got
}

// TestAppendMultiOneTransaction checks the global order of a multi-stream
// append: every row of the call has the call's one transaction ID, each
// stream's rows are in revision order by seq, and a reader of the global
// order gets them together.
func TestAppendMultiOneTransaction(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxFor(t)
	before := mustAppend(t, s, "b", eventstore.NoStream, newEvents(1, "Before")...)
	appends := []eventstore.StreamAppend{
		{Stream: "c", Expected: eventstore.NoStream, Events: newEvents(3, "C")},
		{Stream: "b", Expected: eventstore.Exact(0), Events: newEvents(2, "B")},
		{Stream: "a", Expected: eventstore.NoStream, Events: newEvents(2, "A")},
	}
	results, err := s.AppendMulti(ctx, appends...)
	if err != nil {
		t.Fatal(err)
	}
	var xid uint64
	for i, a := range appends {
		if results[i].Err != nil {
			t.Fatalf("%s: %v", a.Stream, results[i].Err)
		}
		got := mustRead(t, s, a.Stream)
		got = got[len(got)-len(a.Events):]
		for j, r := range got {
			if r.ID != a.Events[j].ID {
				t.Fatalf("%s: event %d is %s, want %s", a.Stream, j, r.ID, a.Events[j].ID)
			}
			if xid == 0 {
				xid = r.Position.Commit
			}
			if r.Position.Commit != xid {
				t.Fatalf("%s@%d written by transaction %d, another row of the call by %d", a.Stream, r.Revision, r.Position.Commit, xid)
			}
			if j > 0 && r.Position.Prepare <= got[j-1].Position.Prepare {
				t.Fatalf("%s: seq %d of revision %d not after %d", a.Stream, r.Position.Prepare, r.Revision, got[j-1].Position.Prepare)
			}
		}
		if last := got[len(got)-1]; results[i].Position != last.Position || results[i].NextRevision != last.Revision {
			t.Fatalf("%s: result %+v, last event at %s revision %d", a.Stream, results[i].AppendResult, last.Position, last.Revision)
		}
	}
	if xid == before.Position.Commit {
		t.Fatalf("the call wrote in the transaction of an earlier append (%d)", xid)
	}

	// A reader after the earlier append gets the call's seven events in a
	// row, and nothing else.
	var all []eventstore.RecordedEvent
	for len(all) < 7 {
		got, err := s.ReadAll(ctx, before.Position, 100)
		if err != nil {
			t.Fatal(err)
		}
		if all = got; len(all) < 7 {
			if err := s.WaitForEvents(ctx, before.Position); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(all) != 7 {
		t.Fatalf("ReadAll after the earlier append: %d events, want 7", len(all))
	}
	for _, r := range all {
		if r.Position.Commit != xid {
			t.Fatalf("ReadAll: %s@%d in transaction %d, want %d", r.Stream, r.Revision, r.Position.Commit, xid)
		}
	}
}

// markTable records, per stream, that a statement of AppendMultiWith saw the
// stream's last event.
const markTable = `CREATE TABLE appended (stream text PRIMARY KEY, last uuid NOT NULL)`

// mark is the statement for a: a row for the stream if its last event is
// stored in it, idempotent.
func mark(a eventstore.StreamAppend) pgstore.Statement {
	last := a.Events[len(a.Events)-1].ID
	return pgstore.Statement{
		SQL:  `INSERT INTO appended (stream, last) SELECT $1, $2::uuid WHERE EXISTS (SELECT 1 FROM event WHERE stream = $1 AND id = $2::uuid) ON CONFLICT DO NOTHING`,
		Args: []any{a.Stream, last},
	}
}

func marks(appends []eventstore.StreamAppend) []pgstore.Statement {
	out := make([]pgstore.Statement, len(appends))
	for i, a := range appends {
		out[i] = mark(a)
	}
	return out
}

// marked returns the streams of the appended table, sorted, after checking
// that each row names the stream's last event as appended.
func marked(t *testing.T, pool *pgxpool.Pool, appends []eventstore.StreamAppend) []string {
	t.Helper()
	rows, _ := pool.Query(ctxFor(t), `SELECT stream, last::text FROM appended ORDER BY stream`)
	type row struct{ Stream, Last string }
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		t.Fatal(err)
	}
	var streams []string
	for _, r := range got {
		for _, a := range appends {
			if a.Stream == r.Stream && a.Events[len(a.Events)-1].ID != r.Last {
				t.Fatalf("row of %s names event %s, want %s", r.Stream, r.Last, a.Events[len(a.Events)-1].ID)
			}
		}
		streams = append(streams, r.Stream)
	}
	return streams
}

func newMarkedStore(t *testing.T) (*pgstore.Store, *pgxpool.Pool) {
	t.Helper()
	pool := dbtest.Pool(t)
	if _, err := pool.Exec(ctxFor(t), markTable); err != nil {
		t.Fatal(err)
	}
	s := pgstore.New(pool, pgstore.Config{})
	t.Cleanup(s.Close)
	return s, pool
}

func checkResults(t *testing.T, appends []eventstore.StreamAppend, results []eventstore.StreamResult, wantOK ...string) {
	t.Helper()
	if len(results) != len(appends) {
		t.Fatalf("%d results for %d appends", len(results), len(appends))
	}
	for i, a := range appends {
		ok := slices.Contains(wantOK, a.Stream)
		if ok && results[i].Err != nil {
			t.Fatalf("%s: %v, want success", a.Stream, results[i].Err)
		}
		if !ok && !errors.Is(results[i].Err, eventstore.ErrWrongExpectedVersion) {
			t.Fatalf("%s: %v, want ErrWrongExpectedVersion", a.Stream, results[i].Err)
		}
	}
}

// TestAppendMultiWith checks that the statements of an AppendMultiWith
// change what they guard exactly for the streams written, whether the call
// is one statement or falls back to one stream at a time, and that a
// failing statement writes nothing at all.
func TestAppendMultiWith(t *testing.T) {
	t.Parallel()

	t.Run("one statement", func(t *testing.T) {
		t.Parallel()
		s, pool := newMarkedStore(t)
		mustAppend(t, s, "x", eventstore.NoStream, newEvents(1, "X")...)
		mustAppend(t, s, "taken", eventstore.NoStream, newEvents(1, "Taken")...)
		appends := []eventstore.StreamAppend{
			{Stream: "a", Expected: eventstore.NoStream, Events: newEvents(2, "A")},
			{Stream: "x", Expected: eventstore.Exact(0), Events: newEvents(1, "X")},
			{Stream: "missing", Expected: eventstore.Exact(3), Events: newEvents(1, "M")},
			{Stream: "taken", Expected: eventstore.NoStream, Events: newEvents(1, "T")},
		}
		results, err := s.AppendMultiWith(ctxFor(t), appends, marks(appends)...)
		if err != nil {
			t.Fatal(err)
		}
		checkResults(t, appends, results, "a", "x")
		if got := marked(t, pool, appends); !slices.Equal(got, []string{"a", "x"}) {
			t.Fatalf("statements marked %v, want [a x]", got)
		}
		if a, x := results[0].Position.Commit, results[1].Position.Commit; a != x {
			t.Fatalf("a written by transaction %d, x by %d: want one", a, x)
		}

		// The same call again: the same results, nothing written twice.
		again, err := s.AppendMultiWith(ctxFor(t), appends, marks(appends)...)
		if err != nil {
			t.Fatal(err)
		}
		checkResults(t, appends, again, "a", "x")
		for i := range 2 {
			if again[i].AppendResult != results[i].AppendResult {
				t.Fatalf("%s repeated: %+v, want the original %+v", appends[i].Stream, again[i].AppendResult, results[i].AppendResult)
			}
		}
		if n := len(mustRead(t, s, "a")); n != 2 {
			t.Fatalf("a holds %d events after the repeat, want 2", n)
		}
		if got := marked(t, pool, appends); !slices.Equal(got, []string{"a", "x"}) {
			t.Fatalf("statements marked %v after the repeat, want [a x]", got)
		}
	})

	t.Run("a race on a head", func(t *testing.T) {
		t.Parallel()
		s, pool := newMarkedStore(t)
		ctx := ctxFor(t)
		mustAppend(t, s, "raced", eventstore.NoStream, newEvents(1, "R")...)
		mustAppend(t, s, "any", eventstore.NoStream, newEvents(1, "Y")...)

		// An open transaction holds revision 1 of raced, and its head: the
		// combined insert waits for the head, then finds raced moved on when
		// it commits and leaves raced out, writing the others.
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck // committed below
		appendRaw(t, tx, "raced", 1, eventstoretest.NewID())
		appends := []eventstore.StreamAppend{
			{Stream: "a", Expected: eventstore.NoStream, Events: newEvents(2, "A")},
			{Stream: "raced", Expected: eventstore.Exact(0), Events: newEvents(1, "R")},
			{Stream: "any", Expected: eventstore.Any, Events: newEvents(1, "Y")},
		}
		out := raceCommit(t, pool, tx, func() ([]eventstore.StreamResult, error) {
			return s.AppendMultiWith(ctx, appends, marks(appends)...)
		})
		checkResults(t, appends, out, "a", "any")
		var wev *eventstore.WrongExpectedVersionError
		if !errors.As(out[1].Err, &wev) || !wev.Exists || wev.Actual != 1 {
			t.Fatalf("raced: %v, want stream at revision 1", out[1].Err)
		}
		if got := marked(t, pool, appends); !slices.Equal(got, []string{"a", "any"}) {
			t.Fatalf("statements marked %v, want [a any]", got)
		}
		if a, y := out[0].Position.Commit, out[2].Position.Commit; a != y {
			t.Fatalf("a and any written by transactions %d and %d: want the one of the combined insert", a, y)
		}
		if n := len(mustRead(t, s, "raced")); n != 2 {
			t.Fatalf("raced holds %d events, want its own and the racer's", n)
		}
	})

	t.Run("one stream at a time after a race", func(t *testing.T) {
		t.Parallel()
		s, pool := newMarkedStore(t)
		ctx := ctxFor(t)
		mustAppend(t, s, "a", eventstore.NoStream, newEvents(1, "A")...)
		mustAppend(t, s, "raced", eventstore.NoStream, newEvents(1, "R")...)
		mustAppend(t, s, "any", eventstore.NoStream, newEvents(1, "Y")...)

		// An open transaction stores in a an event ID that the call appends
		// to a with Any: the combined insert waits for a's head, appends
		// after the racer's event when it commits, and its check of the
		// IDs finds the ID twice in a.
		appends := []eventstore.StreamAppend{
			{Stream: "a", Expected: eventstore.Any, Events: newEvents(2, "A")},
			{Stream: "raced", Expected: eventstore.Exact(0), Events: newEvents(1, "R")},
			{Stream: "any", Expected: eventstore.Any, Events: newEvents(1, "Y")},
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck // committed below
		appendRaw(t, tx, "a", 1, appends[0].Events[0].ID)
		out := raceCommit(t, pool, tx, func() ([]eventstore.StreamResult, error) {
			return s.AppendMultiWith(ctx, appends, marks(appends)...)
		})
		if len(out) != len(appends) {
			t.Fatalf("%d results for %d appends", len(out), len(appends))
		}
		checkResults(t, appends[1:], out[1:], "raced", "any")
		if !errors.Is(out[0].Err, eventstore.ErrDuplicateEventID) {
			t.Fatalf("a: %v, want ErrDuplicateEventID", out[0].Err)
		}
		if got := marked(t, pool, appends); !slices.Equal(got, []string{"any", "raced"}) {
			t.Fatalf("statements marked %v, want [any raced]", got)
		}
		if r, y := out[1].Position.Commit, out[2].Position.Commit; r == y {
			t.Fatalf("raced and any both written by transaction %d: want one transaction per stream after the race", r)
		}
		if n := len(mustRead(t, s, "a")); n != 2 {
			t.Fatalf("a holds %d events after the race, want its own and the racer's", n)
		}
	})

	t.Run("a condition that holds once the statement is done", func(t *testing.T) {
		t.Parallel()
		s, pool := newMarkedStore(t)
		ctx := ctxFor(t)

		// An open transaction creates late: the combined insert does not
		// see it (its snapshot is older) and leaves late out, but by the
		// time the call resolves late it is committed, and StreamExists
		// holds.
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck // committed below
		appendRaw(t, tx, "late", 0, eventstoretest.NewID())
		var commitErr error
		s.SetAfterCombined(func() { commitErr = tx.Commit(ctx) })
		appends := []eventstore.StreamAppend{
			{Stream: "a", Expected: eventstore.NoStream, Events: newEvents(1, "A")},
			{Stream: "late", Expected: eventstore.StreamExists, Events: newEvents(2, "L")},
		}
		results, err := s.AppendMultiWith(ctx, appends, marks(appends)...)
		if err != nil || commitErr != nil {
			t.Fatalf("%v; commit of the racer: %v", err, commitErr)
		}
		checkResults(t, appends, results, "a", "late")
		if results[1].NextRevision != 2 {
			t.Fatalf("late: NextRevision %d, want 2 (after the racer's event)", results[1].NextRevision)
		}
		if a, late := results[0].Position.Commit, results[1].Position.Commit; a == late {
			t.Fatalf("a and late both written by transaction %d: want late appended again on its own", a)
		}
		if got := marked(t, pool, appends); !slices.Equal(got, []string{"a", "late"}) {
			t.Fatalf("statements marked %v, want [a late]", got)
		}
	})

	for name, n := range map[string]int{"a failing statement writes nothing, one stream": 1, "a failing statement writes nothing, three streams": 3} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, pool := newMarkedStore(t)
			var appends []eventstore.StreamAppend
			for _, stream := range []string{"a", "b", "c"}[:n] {
				appends = append(appends, eventstore.StreamAppend{Stream: stream, Expected: eventstore.NoStream, Events: newEvents(2, "E")})
			}
			then := append(marks(appends), pgstore.Statement{SQL: `SELECT 1 / $1::int`, Args: []any{0}})
			results, err := s.AppendMultiWith(ctxFor(t), appends, then...)
			if !errors.Is(err, pgstore.ErrStatement) || results != nil {
				t.Fatalf("%d results, %v; want ErrStatement", len(results), err)
			}
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) {
				t.Fatalf("driver error %T leaks from %v", pgErr, err)
			}
			for _, a := range appends {
				if _, err := s.ReadStream(ctxFor(t), a.Stream, 0); !errors.Is(err, eventstore.ErrStreamNotFound) {
					t.Fatalf("%s after the failed call: %v, want ErrStreamNotFound", a.Stream, err)
				}
			}
			if got := marked(t, pool, appends); len(got) != 0 {
				t.Fatalf("statements marked %v after the failed call, want none", got)
			}
		})
	}
}

// TestAppendMultiWithLostConnection: a statement whose connection is lost
// did not fail by itself: the call is ErrUnavailable, not ErrStatement, and
// nothing of its transaction is written.
func TestAppendMultiWithLostConnection(t *testing.T) {
	t.Parallel()
	for name, n := range map[string]int{"one stream": 1, "three streams": 3} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, pool := newMarkedStore(t)
			var appends []eventstore.StreamAppend
			for _, stream := range []string{"a", "b", "c"}[:n] {
				appends = append(appends, eventstore.StreamAppend{Stream: stream, Expected: eventstore.NoStream, Events: newEvents(1, "E")})
			}
			then := append(marks(appends), pgstore.Statement{SQL: `SELECT pg_terminate_backend(pg_backend_pid())`})
			results, err := s.AppendMultiWith(ctxFor(t), appends, then...)
			if !errors.Is(err, eventstore.ErrUnavailable) || errors.Is(err, pgstore.ErrStatement) || results != nil {
				t.Fatalf("%d results, %v; want ErrUnavailable", len(results), err)
			}
			for _, a := range appends {
				if _, err := s.ReadStream(ctxFor(t), a.Stream, 0); !errors.Is(err, eventstore.ErrStreamNotFound) {
					t.Fatalf("%s after the lost connection: %v, want ErrStreamNotFound", a.Stream, err)
				}
			}
			if got := marked(t, pool, appends); len(got) != 0 {
				t.Fatalf("statements marked %v after the lost connection, want none", got)
			}
		})
	}
}

// appendRaw writes an event at revision of stream in tx as an append
// writes it: the stream's head and the event.
func appendRaw(t *testing.T, tx pgx.Tx, stream string, revision int64, id string) {
	t.Helper()
	if _, err := tx.Exec(ctxFor(t), `WITH head AS (
			INSERT INTO event_stream (stream, revision) VALUES ($1, $2)
			ON CONFLICT (stream) DO UPDATE SET revision = excluded.revision)
		INSERT INTO event (stream, revision, id, type, data, metadata) VALUES ($1, $2, $3, 'Racer', '', '')`, stream, revision, id); err != nil {
		t.Fatal(err)
	}
}

// raceCommit runs call, which is to wait for a lock tx holds, commits tx
// once it waits, and returns call's results.
func raceCommit(t *testing.T, pool *pgxpool.Pool, tx pgx.Tx, call func() ([]eventstore.StreamResult, error)) []eventstore.StreamResult {
	t.Helper()
	type outcome struct {
		results []eventstore.StreamResult
		err     error
	}
	done := make(chan outcome, 1)
	go func() {
		results, err := call()
		done <- outcome{results, err}
	}()
	waitFor(t, pool, `SELECT count(*) > 0 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`)
	if err := tx.Commit(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	out := <-done
	if out.err != nil {
		t.Fatal(out.err)
	}
	return out.results
}
