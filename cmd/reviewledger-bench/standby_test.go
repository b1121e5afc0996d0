package main

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestStandbyPairSwitchesSynchronousCommit: the private pair starts, its
// standby is reported asynchronous, then synchronous, and a commit made
// while it is synchronous is on the standby when the commit returns.
func TestStandbyPairSwitchesSynchronousCommit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, err := startPair(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := p.stop(); err != nil {
			t.Error(err)
		}
	}()
	conn, err := pgx.Connect(ctx, p.adminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	state := func() string {
		t.Helper()
		var s string
		if err := conn.QueryRow(ctx, `SELECT sync_state FROM pg_stat_replication`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if got := state(); got != "async" {
		t.Fatalf("after start the standby is %q, want async", got)
	}
	if err := p.setSync(ctx, true); err != nil {
		t.Fatal(err)
	}
	if got := state(); got != "sync" {
		t.Fatalf("after setSync(true) the standby is %q, want sync", got)
	}
	// remote_apply: the commit returns once the synchronous standby has
	// applied it, so the row is there to read at once.
	if _, err := conn.Exec(ctx, `SET synchronous_commit = remote_apply`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE marker (n int)`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO marker VALUES (42)`); err != nil {
		t.Fatal(err)
	}
	standby, err := pgx.Connect(ctx, strings.Replace(p.adminURL(), strconv.Itoa(p.primary), strconv.Itoa(p.standby), 1))
	if err != nil {
		t.Fatal(err)
	}
	defer standby.Close(ctx)
	var n int
	if err := standby.QueryRow(ctx, `SELECT n FROM marker`).Scan(&n); err != nil || n != 42 {
		t.Fatalf("the standby, read as the synchronous commit returned: %d, %v; want 42", n, err)
	}
	if err := p.setSync(ctx, false); err != nil {
		t.Fatal(err)
	}
	if got := state(); got != "async" {
		t.Fatalf("after setSync(false) the standby is %q, want async", got)
	}
}

func TestReportPrintsTheStandbyRatio(t *testing.T) {
	s := &standbyRun{
		async: []figures{{PerSecond: 1000, P99: 20 * time.Millisecond}, {PerSecond: 1200, P99: 30 * time.Millisecond}},
		sync:  []figures{{PerSecond: 800, P99: 40 * time.Millisecond}, {PerSecond: 850, P99: 50 * time.Millisecond}},
	}
	var b bytes.Buffer
	s.print(&b)
	want := "asynchronous 1100/s p99 25.0ms, synchronous 825/s p99 45.0ms; ratio synchronous to asynchronous 0.750"
	if !strings.Contains(b.String(), want) {
		t.Errorf("printed %q, want it to contain %q", b.String(), want)
	}
	b.Reset()
	(*standbyRun)(nil).print(&b)
	if b.Len() != 0 {
		t.Errorf("a run without the standby printed %q", b.String())
	}
}
