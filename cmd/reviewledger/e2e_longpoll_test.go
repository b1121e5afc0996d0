package main

// End-to-end tests of the long-poll, GET /v1/reviews/{id}?wait=D: a waiter
// is woken by a decision made in another serve process sharing the
// database, and a thousand waiters cost the database nothing while nothing
// changes.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// longPoll is GET /v1/reviews/{id}?wait=60s, with how long it took.
type longPoll struct {
	view    reviewView
	status  int
	elapsed time.Duration
	err     error
}

func startLongPoll(ctx context.Context, client *http.Client, p *serveProc, id string) <-chan longPoll {
	out := make(chan longPoll, 1)
	go func() {
		start := time.Now()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/v1/reviews/"+id+"?wait=60s", nil)
		if err != nil {
			out <- longPoll{err: err}
			return
		}
		req.Header.Set("Authorization", "Bearer "+tokSubmitter)
		res, err := client.Do(req)
		if err != nil {
			out <- longPoll{err: err}
			return
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		lp := longPoll{status: res.StatusCode, elapsed: time.Since(start)}
		lp.err = json.Unmarshal(raw, &lp.view)
		out <- lp
	}()
	return out
}

// TestE2ELongPollAcrossProcesses: a review parked in one serve process
// (the provider took it for asynchronous review) is waited on through
// another; the provider's callback, applied by the first, wakes the
// waiter, which answers with the decision long before its 60s wait ends.
func TestE2ELongPollAcrossProcesses(t *testing.T) {
	t.Parallel()
	prov := newLoadProvider(t, 0, true)
	env := loadEnv(t, dbtest.URL(t), prov.URL())
	deciding, waiting := startServe(t, env), startServe(t, env)
	const id = "longpoll-across-1"
	deciding.submit(t, id, "e2e_parked", content(id))
	clocktest.EventuallyShows(t, "the provider to take the review", func() (bool, string) {
		return len(prov.calls(id)) == 1, fmt.Sprint(prov.calls(id))
	})
	answer := startLongPoll(context.Background(), e2eClient, waiting, id)
	clocktest.EventuallyShows(t, "the waiter to wait", func() (bool, string) {
		v := metricValue(t, waiting, "reviewledger_http_review_waiters")
		return v == 1, fmt.Sprint(v)
	})
	callbacks := newScriptedProvider(t)
	callbacks.setTarget(deciding.URL)
	status, err := callbacks.sendCallback(id, 1, "accepted", []string{"callback"}, time.Now(), e2eSecretKey)
	if err != nil || status != http.StatusOK {
		t.Fatalf("callback to the deciding process: %d %v", status, err)
	}
	select {
	case lp := <-answer:
		if lp.err != nil || lp.status != http.StatusOK || lp.view.State != "accepted" {
			t.Fatalf("long-poll: %d %+v %v", lp.status, lp.view, lp.err)
		}
		// Had the decision not woken it, it would have answered at 60s.
		if lp.elapsed >= 50*time.Second {
			t.Errorf("the long-poll answered after %s: woken by its timer, not by the decision", lp.elapsed)
		}
	case <-time.After(70 * time.Second):
		t.Fatal("the long-poll never answered")
	}
}

// TestE2ELongPollWaitersCostNothing: with 1,000 reviews parked, the
// transactions the server's database commits per second are measured
// over 10 s with no request, then over 10 s while 1,000 clients wait on
// them: the waiters add no more than a handful (a waiter polling the
// database even once a minute would add 160 per 10 s). Each window starts
// 11 s after the previous burst, since PostgreSQL reports an idle
// backend's counts up to 10 s late.
func TestE2ELongPollWaitersCostNothing(t *testing.T) {
	t.Parallel()
	prov := newLoadProvider(t, 0, true)
	dbURL := dbtest.URL(t)
	env := loadEnv(t, dbURL, prov.URL())
	srv := startServe(t, env)
	const n = 1000
	ids := reviewIDs("longpoll-idle", n)
	submitAll(t, []*serveProc{srv}, ids, "e2e_parked", 32)
	clocktest.EventuallyShows(t, "every review to be parked", func() (bool, string) {
		v := metricValue(t, srv, "reviewledger_engine_parked_reviews")
		return v == n, fmt.Sprint(v)
	})

	stats := statsConn(t)
	dbName := dbNameOf(t, dbURL)
	noAutovacuum(t, dbURL)
	measure := func() float64 {
		t.Helper()
		time.Sleep(11 * time.Second)
		before := xacts(t, stats, dbName)
		time.Sleep(10 * time.Second)
		return float64(xacts(t, stats, dbName) - before)
	}
	idle := measure()
	if idle == 0 {
		t.Fatal("no transaction counted in 10 s: the measurement sees nothing (the engine alone looks for due work every second)")
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n}}
	defer client.CloseIdleConnections()
	var answered atomic.Int64
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			if lp := <-startLongPoll(ctx, client, srv, id); lp.err == nil {
				answered.Add(1)
			}
		})
	}
	clocktest.EventuallyShows(t, "1,000 waiters", func() (bool, string) {
		v := metricValue(t, srv, "reviewledger_http_review_waiters")
		return v == n, fmt.Sprint(v)
	})
	waitingStart := time.Now()
	waiting := measure()
	if v := metricValue(t, srv, "reviewledger_http_review_waiters"); v != n {
		t.Errorf("%v waiters at the end of the window, want %d", v, n)
	}
	if time.Since(waitingStart) >= 55*time.Second {
		t.Fatalf("the window outlasted the waits")
	}
	cancel()
	wg.Wait()
	t.Logf("transactions in 10 s: %.0f idle, %.0f with %d waiters", idle, waiting, n)
	if answered.Load() != 0 {
		t.Errorf("%d waits answered while nothing changed", answered.Load())
	}
	if waiting-idle > max(20, idle/2) {
		t.Errorf("%d waiters added %.0f transactions in 10 s (%.0f idle, %.0f waiting)", n, waiting-idle, idle, waiting)
	}
}

// noAutovacuum turns autovacuum off for every table of the database at
// dbURL: its workers' transactions count in the database's commits, and
// on a server that runs it (a stock one does) the 1,000 reviews just
// written wake it in either window, which is not the waiters' doing.
func noAutovacuum(t *testing.T, dbURL string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind IN ('r', 'm') AND n.nspname = current_schema()`)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for _, tbl := range tables {
		if _, err := conn.Exec(ctx, `ALTER TABLE `+tbl+` SET (autovacuum_enabled = false, toast.autovacuum_enabled = false)`); err != nil {
			t.Fatalf("autovacuum off for %s: %v", tbl, err)
		}
	}
}

// statsConn connects to the test server's maintenance database, whose
// own statements are not counted against the one measured.
func statsConn(t *testing.T) *pgx.Conn {
	t.Helper()
	base := os.Getenv("TEST_DATABASE_URL")
	if base == "" {
		base = dbtest.DefaultURL
	}
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func dbNameOf(t *testing.T, dbURL string) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Database
}

// xacts is the database's committed and rolled back transactions so far.
func xacts(t *testing.T, conn *pgx.Conn, db string) int64 {
	t.Helper()
	var n int64
	if err := conn.QueryRow(context.Background(), `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1`, db).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
