package patroni_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/reviewledger/reviewledger/migrations/dbtest/patroni"
)

// start starts a cluster for the test, failing it when Patroni or etcd is
// missing under CI and skipping it, with the reason, elsewhere.
func start(t *testing.T, sync bool) *patroni.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts etcd and Patroni; skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := patroni.Start(ctx, patroni.Options{SynchronousMode: sync, Logf: t.Logf})
	if errors.Is(err, patroni.ErrMissing) && os.Getenv("CI") == "" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(c.Logs())
		}
		c.Stop()
	})
	return c
}

// write inserts n into the table t through url, on a new connection.
func write(ctx context.Context, url string, n int) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, `INSERT INTO t VALUES ($1)`, n)
	return err
}

// count returns how many rows t has on the primary.
func count(t *testing.T, ctx context.Context, url string) int {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM t`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// writeEventually writes n, retrying while no primary takes writes. A
// retry that finds n already there is done: an earlier try committed and
// its acknowledgement was lost (cut off at its 5 s while the commit waited
// for the synchronous standby; PostgreSQL keeps a commit made locally).
func writeEventually(t *testing.T, ctx context.Context, url string, n int) {
	t.Helper()
	for {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := write(wctx, url, n)
		cancel()
		var pgErr *pgconn.PgError
		if err == nil || errors.As(err, &pgErr) && pgErr.Code == "23505" { // unique_violation
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("write %d: %v", n, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestFaults: in one synchronous cluster, the leader's postgres is
// killed, then the new leader's agent, then a switchover is made; after
// each a new leader takes the writes the multi-host URL sends, no
// acknowledged write is lost, and the old leader comes back as a
// replica.
func TestFaults(t *testing.T) {
	c := start(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	url, err := c.CreateDatabase(ctx, "kit")
	if err != nil {
		t.Fatal(err)
	}
	if err := write(ctx, url, 0); err == nil {
		t.Fatal("insert into a missing table succeeded")
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE t (n int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	acked := 0
	writeAcked := func() {
		acked++
		writeEventually(t, ctx, url, acked)
	}
	writeAcked()

	faults := []struct {
		name  string
		fault func(old *patroni.Member) error
	}{
		{"kill postgres", func(old *patroni.Member) error { return old.KillPostgres() }},
		{"kill agent", func(old *patroni.Member) error { old.KillAgent(); return nil }},
		{"switchover", func(*patroni.Member) error { _, err := c.Switchover(ctx); return err }},
	}
	for _, f := range faults {
		old, err := c.Leader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.fault(old); err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		leader, err := c.WaitLeader(ctx, old)
		if err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		t.Logf("%s of %s: %s leads", f.name, old.Name, leader.Name)
		if f.name == "kill agent" {
			// Its PostgreSQL still runs as a primary, taking connections
			// and waiting at every commit for a synchronous standby that
			// follows another leader now: nothing is acknowledged there,
			// until the agent, started again as a supervisor would,
			// demotes it.
			if err := old.StartAgent(); err != nil {
				t.Fatal(err)
			}
		}
		writeAcked()
		if err := c.WaitHealthy(ctx); err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		if got := count(t, ctx, url); got != acked {
			t.Fatalf("after %s: %d rows, want the %d acknowledged", f.name, got, acked)
		}
	}
	// A replica refuses writes with read_only_sql_transaction.
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range c.Members {
		if m == leader {
			continue
		}
		err := write(ctx, m.URL("kit"), 1000)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "25006" {
			t.Errorf("write on replica %s: %v, want SQLSTATE 25006", m.Name, err)
		}
	}
}
