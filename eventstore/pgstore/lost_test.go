package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
	"github.com/reviewledger/reviewledger/eventstore/pgstore"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// TestReadsAfterTheServerClosedTheConnections: the server closes the
// pool's idle connections (as a restart does) and the pool hands them out
// unchecked (as it does one used less than a second ago): every read
// still answers, from a fresh connection, instead of failing as
// unavailable once per dead connection.
func TestReadsAfterTheServerClosedTheConnections(t *testing.T) {
	t.Parallel()
	url := dbtest.URL(t)
	pool := uncheckedPool(t, url, false)
	admin := dbtest.PoolOn(t, url, nil)
	s := pgstore.New(pool, pgstore.Config{})
	t.Cleanup(s.Close)
	ctx := ctxFor(t)
	if _, err := s.Append(ctx, "review-lost", eventstore.NoStream, newEvents(2, "E")...); err != nil {
		t.Fatal(err)
	}
	reads := []struct {
		name string
		read func() error
	}{
		{"ReadStream", func() error { _, err := s.ReadStream(ctx, "review-lost", 0); return err }},
		{"ReadStream past the end", func() error { _, err := s.ReadStream(ctx, "review-lost", 5); return err }},
		{"ReadAll", func() error { _, err := s.ReadAll(ctx, eventstore.Start, 10); return err }},
		{"ReadAllHeads", func() error { _, err := s.ReadAllHeads(ctx, eventstore.Start, 10); return err }},
		{"Head", func() error { _, err := s.Head(ctx); return err }},
	}
	for _, r := range reads {
		closeIdle(t, pool, admin, 3)
		if err := r.read(); err != nil {
			t.Errorf("%s after the server closed the pool's connections: %v", r.name, err)
		}
	}
}

// closeIdle leaves n connections of pool idle, then has the server
// terminate their sessions (through admin) and waits until they are gone.
func closeIdle(t *testing.T, pool, admin *pgxpool.Pool, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conns := make([]*pgxpool.Conn, n)
	pids := make([]uint32, n)
	for i := range conns {
		c, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns[i], pids[i] = c, c.Conn().PgConn().PID()
	}
	for _, c := range conns {
		c.Release()
	}
	if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid`, pids); err != nil {
		t.Fatal(err)
	}
	clocktest.Eventually(t, "the terminated sessions gone", func() bool {
		var left int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1::int[])`, pids).Scan(&left); err != nil {
			t.Fatal(err)
		}
		return left == 0
	})
}

// TestLostConnectionsResetsThePool: with LostConnections as its tracer, a
// pool whose idle connections the server closed fails the one statement
// that finds the first of them dead, not one per connection: the next
// statement gets a fresh connection, after a query as after a batch.
// Untraced, the next one fails too (the control: the test does leave dead
// connections idle).
func TestLostConnectionsResetsThePool(t *testing.T) {
	t.Parallel()
	url := dbtest.URL(t)
	admin := dbtest.PoolOn(t, url, nil)
	statements := map[string]func(ctx context.Context, pool *pgxpool.Pool) error{
		"a query": func(ctx context.Context, pool *pgxpool.Pool) error { _, err := pool.Exec(ctx, `SELECT 1`); return err },
		"a batch": func(ctx context.Context, pool *pgxpool.Pool) error {
			b := &pgx.Batch{}
			b.Queue(`SELECT 1`)
			b.Queue(`SELECT 2`)
			return pool.SendBatch(ctx, b).Close()
		},
	}
	for what, run := range statements {
		for _, traced := range []bool{false, true} {
			pool := uncheckedPool(t, url, traced)
			ctx := ctxFor(t)
			closeIdle(t, pool, admin, 3)
			if err := run(ctx, pool); err == nil {
				t.Fatalf("%s on a dead connection (traced %v): no error", what, traced)
			}
			err := run(ctx, pool)
			switch {
			case traced && err != nil:
				t.Errorf("%s after the first found its connection dead: %v, want a fresh connection", what, err)
			case !traced && err == nil:
				t.Errorf("untraced, %s after the first found its connection dead: no error; the test does not leave dead connections idle", what)
			}
		}
	}
}

// TestStatementErrorsResetNothing: a statement that fails by itself (no
// rows, a value that does not scan, the server refusing it), and a read
// of an empty ledger, leave the pool's connections as they are.
func TestStatementErrorsResetNothing(t *testing.T) {
	t.Parallel()
	url := dbtest.URL(t)
	pool := uncheckedPool(t, url, true)
	s := pgstore.New(pool, pgstore.Config{})
	t.Cleanup(s.Close)
	ctx := ctxFor(t)
	var n int
	failing := map[string]func() error{
		"no rows":                    func() error { return pool.QueryRow(ctx, `SELECT 1 WHERE false`).Scan(&n) },
		"a value that does not scan": func() error { return pool.QueryRow(ctx, `SELECT 'x'`).Scan(&n) },
		"a refused statement":        func() error { _, err := pool.Exec(ctx, `SELECT 1/0`); return err },
		"a batch refused":            func() error { b := &pgx.Batch{}; b.Queue(`SELECT 1/0`); return pool.SendBatch(ctx, b).Close() },
		"Head of an empty ledger": func() error {
			if _, err := s.Head(ctx); err != nil {
				t.Fatal(err)
			}
			return errors.New("read")
		},
	}
	for what, run := range failing {
		before := pid(t, pool)
		if err := run(); err == nil {
			t.Fatalf("%s: no error", what)
		}
		if after := pid(t, pool); after != before {
			t.Errorf("%s: the pool's connection changed (backend %d, then %d): it was reset", what, before, after)
		}
	}
}

// uncheckedPool opens a pool on url that never pings a connection it
// hands out (as pgxpool does not one used less than a second ago), with
// LostConnections as its tracer when traced. Used by one statement at a
// time, it holds one connection.
func uncheckedPool(t *testing.T, url string, traced bool) *pgxpool.Pool {
	t.Helper()
	lost := &pgstore.LostConnections{}
	pool := dbtest.PoolOn(t, url, func(c *pgxpool.Config) {
		c.MaxConns = 4
		c.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
		if traced {
			c.ConnConfig.Tracer = lost
		}
	})
	lost.Watch(pool)
	return pool
}

// pid returns the backend of the connection pool hands out next.
func pid(t *testing.T, pool *pgxpool.Pool) uint32 {
	t.Helper()
	c, err := pool.Acquire(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	return c.Conn().PgConn().PID()
}

// TestDemotedServerIsUnavailable: a server that refuses writes because it
// has become a standby (read_only_sql_transaction, as every session of a
// demoted primary gets; here the pool's sessions are made read-only the
// same way) makes an append fail as unavailable, to be retried, never as
// a refusal, and the traced pool drops its connections to it at once, so
// that the next one is dialled afresh. Untraced, the pool keeps the
// connection (the control).
func TestDemotedServerIsUnavailable(t *testing.T) {
	t.Parallel()
	url := dbtest.URL(t)
	for _, traced := range []bool{false, true} {
		lost := &pgstore.LostConnections{}
		pool := dbtest.PoolOn(t, url, func(c *pgxpool.Config) {
			c.MaxConns = 1
			c.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
			if traced {
				c.ConnConfig.Tracer = lost
			}
		})
		lost.Watch(pool)
		s := pgstore.New(pool, pgstore.Config{})
		t.Cleanup(s.Close)
		before := pid(t, pool)
		_, err := s.Append(ctxFor(t), "review-demoted", eventstore.NoStream, newEvents(1, "E")...)
		if !errors.Is(err, eventstore.ErrUnavailable) {
			t.Fatalf("append on a read-only server (traced %v): %v, want it to match ErrUnavailable", traced, err)
		}
		after := pid(t, pool)
		switch {
		case traced && after == before:
			t.Errorf("the traced pool kept its connection (backend %d) to the server that refused the write as a standby", before)
		case !traced && after != before:
			t.Errorf("untraced, the pool dialled anew (backend %d, then %d): the test does not keep the connection", before, after)
		}
	}
}
