package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
	"github.com/reviewledger/reviewledger/eventstore/eventstoretest"
	"github.com/reviewledger/reviewledger/eventstore/pgstore"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newStore(t *testing.T) *pgstore.Store {
	s := pgstore.New(dbtest.Pool(t), pgstore.Config{})
	t.Cleanup(s.Close)
	return s
}

func TestConformance(t *testing.T) {
	eventstoretest.Run(t, func(t *testing.T) eventstore.Store { return newStore(t) })
}

// TestConformanceSimpleProtocol runs the suite on a pool that sends every
// argument as untyped text (pgx's simple protocol, which a connection
// string chooses with default_query_exec_mode=simple_protocol).
func TestConformanceSimpleProtocol(t *testing.T) {
	eventstoretest.Run(t, func(t *testing.T) eventstore.Store {
		s := pgstore.New(dbtest.PoolWith(t, dbtest.SimpleProtocol), pgstore.Config{})
		t.Cleanup(s.Close)
		return s
	})
}

// TestHeldBackByOpenTransaction writes an event in a transaction left open,
// appends another after it, and checks that the later one stays unreadable
// until the earlier commits, then both come in transaction order: the case
// a plain sequence gets wrong.
func TestHeldBackByOpenTransaction(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	s := pgstore.New(pool, pgstore.Config{})
	t.Cleanup(s.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // committed below
	early := eventstoretest.NewID()
	if _, err := tx.Exec(ctx, `INSERT INTO event (stream, revision, id, type, data, metadata) VALUES ('slow', 0, $1, 'Slow', '', '')`, early); err != nil {
		t.Fatal(err)
	}
	late := eventstore.EventData{ID: eventstoretest.NewID(), Type: "Fast", Data: []byte(`{}`)}
	if _, err := s.Append(ctx, "fast", eventstore.NoStream, late); err != nil {
		t.Fatal(err)
	}

	// The later event is committed (its stream reads it) but not in the
	// global order yet.
	if got, err := s.ReadStream(ctx, "fast", 0); err != nil || len(got) != 1 {
		t.Fatalf("ReadStream: %d events, %v", len(got), err)
	}
	if got, err := s.ReadAll(ctx, eventstore.Start, 10); err != nil || len(got) != 0 {
		t.Fatalf("ReadAll while an older transaction is open: %d events, %v; want none", len(got), err)
	}
	st, err := s.Stall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.HeldBack != 1 || st.XIDSpan == 0 {
		t.Fatalf("Stall while held back: %+v, want 1 event held back", st)
	}
	// A waiter is told events are coming, soon.
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	if err := s.WaitForEvents(wctx, eventstore.Start); err != nil {
		t.Fatalf("WaitForEvents while held back: %v", err)
	}

	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// Other transactions on the server may hold the order back a moment
	// longer; wait for both events.
	var got []eventstore.RecordedEvent
	for len(got) < 2 {
		if got, err = s.ReadAll(ctx, eventstore.Start, 10); err != nil {
			t.Fatal(err)
		}
		if len(got) < 2 {
			if err := s.WaitForEvents(ctx, eventstore.Start); err != nil {
				t.Fatalf("waiting for the events after commit: %v", err)
			}
		}
	}
	if len(got) != 2 || got[0].ID != early || got[1].ID != late.ID {
		t.Fatalf("ReadAll after commit: %+v; want the early event, then the late one", got)
	}
	if st, err := s.Stall(ctx); err != nil || st.HeldBack != 0 || st.Oldest != 0 {
		t.Fatalf("Stall once both are readable: %+v, %v; want nothing held back", st, err)
	}
}

// TestNotificationAcrossStores checks that an append through one Store wakes
// a waiter on another (as in another process) sooner than the poll interval.
func TestNotificationAcrossStores(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	writer := pgstore.New(pool, pgstore.Config{})
	t.Cleanup(writer.Close)
	reader := pgstore.New(pool, pgstore.Config{PollInterval: time.Hour})
	t.Cleanup(reader.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	woke := make(chan error, 1)
	go func() {
		for {
			if err := reader.WaitForEvents(ctx, eventstore.Start); err != nil {
				woke <- err
				return
			}
			if got, err := reader.ReadAll(ctx, eventstore.Start, 1); err != nil || len(got) > 0 {
				woke <- err
				return
			}
		}
	}()
	// The reader listens (its LISTEN runs; appends before it ends are
	// announced to its waiters once it has): the append below is told to
	// it by notification, whether or not its waiter has blocked yet.
	clocktest.Eventually(t, "the reader listening", func() bool { return listeners(t, pool) == 1 })
	if _, err := writer.Append(ctx, "s", eventstore.NoStream, eventstore.EventData{ID: eventstoretest.NewID(), Type: "T"}); err != nil {
		t.Fatal(err)
	}
	if err := <-woke; err != nil {
		t.Fatalf("waiting on another store: %v", err)
	}
}

// listeners counts the sessions of pool's database that listen for
// appends.
func listeners(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query = 'LISTEN '||$1`, pgstore.Channel).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestTheListenerStartsWithTheFirstWait checks that a store opens its
// listening connection only once something waits for events: a command
// that only reads and appends (audit verify, replay) costs the server no
// connection for it.
func TestTheListenerStartsWithTheFirstWait(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	s := pgstore.New(pool, pgstore.Config{PollInterval: 10 * time.Millisecond})
	t.Cleanup(s.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := s.Append(ctx, "s", eventstore.NoStream, eventstore.EventData{ID: eventstoretest.NewID(), Type: "T"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReadAll(ctx, eventstore.Start, 10); err != nil {
		t.Fatal(err)
	}
	if n := listeners(t, pool); n != 0 {
		t.Fatalf("%d listening connections before any wait, want none", n)
	}
	head, err := s.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WaitForEvents(ctx, head); err != nil {
		t.Fatal(err)
	}
	clocktest.Eventually(t, "the listener connected", func() bool { return listeners(t, pool) == 1 })
}

// TestReadAllHeads checks that ReadAllHeads gives the events ReadAll
// gives, page by page, with their stream, revision, position and type.
func TestReadAllHeads(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i, stream := range []string{"a", "b", "a", "c", "b", "a"} {
		rev := eventstore.Any
		if _, err := s.Append(ctx, stream, rev, eventstore.EventData{ID: eventstoretest.NewID(), Type: "T" + string(rune('0'+i)), Data: []byte(`{"n":1}`)}); err != nil {
			t.Fatal(err)
		}
	}
	var all []eventstore.RecordedEvent
	for len(all) < 6 {
		got, err := s.ReadAll(ctx, eventstore.Start, 10)
		if err != nil {
			t.Fatal(err)
		}
		if all = got; len(all) < 6 {
			if err := s.WaitForEvents(ctx, eventstore.Start); err != nil {
				t.Fatal(err)
			}
		}
	}
	pos := eventstore.Start
	var heads []eventstore.RecordedEvent
	for {
		got, err := s.ReadAllHeads(ctx, pos, 4)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			break
		}
		heads = append(heads, got...)
		pos = got[len(got)-1].Position
	}
	if len(heads) != len(all) {
		t.Fatalf("ReadAllHeads: %d events, ReadAll %d", len(heads), len(all))
	}
	for i, h := range heads {
		a := all[i]
		if h.Stream != a.Stream || h.Revision != a.Revision || h.Position != a.Position || h.Type != a.Type {
			t.Errorf("event %d: heads %+v, ReadAll %+v", i, h, a)
		}
		if h.Data != nil || h.Metadata != nil || h.ID != "" {
			t.Errorf("event %d: heads carry a body: %+v", i, h)
		}
	}
	if got, err := s.ReadAllHeads(ctx, eventstore.Start, 0); err != nil || len(got) != 0 {
		t.Fatalf("ReadAllHeads(Start, 0): %d events, %v; want none", len(got), err)
	}
}
