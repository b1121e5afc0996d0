package main

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
	"github.com/reviewledger/reviewledger/migrations/dbtest/cluster"
	"github.com/reviewledger/reviewledger/migrations/dbtest/pgbouncer"
	"github.com/reviewledger/reviewledger/projections"
)

// bouncerPool is the private PgBouncer's default_pool_size: fewer server
// sessions than serve's own pool (pgbouncerBudget less the sessions its
// roles hold), so that a count above it shows a pool reaching the server
// around PgBouncer.
const (
	bouncerPool     = 4
	pgbouncerBudget = 16
)

// pgbouncerHeld is what serve's roles (api, worker, projector) hold on
// the session URL: LISTEN, the sweeper's election, one per projection,
// and the session pool.
var pgbouncerHeld = 1 + 1 + len(projections.Names()) + 1

// TestE2EPgBouncer: serve with DATABASE_URL through a private PgBouncer
// in transaction pooling mode and REVIEWLEDGER_SESSION_DATABASE_URL
// straight to a private PostgreSQL server. 300 reviews under load are
// each decided once, the projections catch up and audit verify passes,
// all through PgBouncer; the server holds no more sessions than
// PgBouncer's pool and the roles' own. Then the server is killed with
// SIGKILL and started again under a load of 200 more: every review taken
// (202) is in the ledger and ends accepted, decided once.
func TestE2EPgBouncer(t *testing.T) {
	t.Parallel()
	pgbouncer.Bin(t)
	pg := cluster.Start(t)
	direct := pg.CreateDatabase("reviewledger")
	bouncer := pgbouncer.Start(t, direct, bouncerPool)
	prov := newLoadProvider(t, 50*time.Millisecond, false)
	env := loadEnv(t, bouncer.URL(direct), prov.URL())
	env["REVIEWLEDGER_SESSION_DATABASE_URL"] = direct
	env["REVIEWLEDGER_DB_MAX_CONNS"] = "16"

	// Misconfigurations are refused at startup, naming the setting.
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"locks through the pooler", map[string]string{"REVIEWLEDGER_SESSION_DATABASE_URL": ""},
			"DATABASE_URL: reaches a connection pooler, which keeps no session for advisory locks and LISTEN: set REVIEWLEDGER_SESSION_DATABASE_URL"},
		{"session URL through the pooler", map[string]string{"REVIEWLEDGER_SESSION_DATABASE_URL": bouncer.URL(direct)},
			"REVIEWLEDGER_SESSION_DATABASE_URL: reaches a connection pooler"},
		{"prepared statements through the pooler", map[string]string{"DATABASE_URL": env["DATABASE_URL"] + "&default_query_exec_mode=cache_statement"},
			"DATABASE_URL: reaches a connection pooler, which keeps no prepared statement"},
	} {
		code, _, stderr := runBin(t, merged(env, tc.env), "serve")
		if code == 0 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want a failure saying %q", tc.name, code, stderr, tc.want)
		}
	}
	if code, _, stderr := runBin(t, merged(env, map[string]string{"REVIEWLEDGER_SESSION_DATABASE_URL": ""}), "migrate"); code == 0 ||
		!strings.Contains(stderr, "set REVIEWLEDGER_SESSION_DATABASE_URL") {
		t.Errorf("migrate with its lock through the pooler: exit %d, stderr %q", code, stderr)
	}

	srv := startServe(t, env)
	procs := []*serveProc{srv}

	t.Run("load", func(t *testing.T) {
		ids := reviewIDs("bouncer-load", 300)
		peak := sampleSessions(t, direct, func() { submitAll(t, procs, ids, "e2e_load", 16) })
		for _, id := range ids {
			settledState(t, procs, id)
		}
		checkOutcomes(t, srv, prov, ids, "accepted", 3)
		t.Logf("at most %d server sessions under load (PgBouncer's pool %d, the roles' %d)", peak, bouncerPool, pgbouncerHeld)
		if peak > bouncerPool+pgbouncerHeld {
			t.Errorf("%d server sessions under load, more than PgBouncer's pool (%d) and the roles' sessions (%d)", peak, bouncerPool, pgbouncerHeld)
		}
		if peak <= pgbouncerHeld {
			t.Errorf("%d server sessions under load: no ordinary traffic reached the server through PgBouncer", peak)
		}
		checkLedger(t, srv)
	})

	t.Run("failover", func(t *testing.T) {
		ids := reviewIDs("bouncer-failover", 200)
		faulted := make(chan struct{})
		go func() {
			defer close(faulted)
			time.Sleep(500 * time.Millisecond) // submissions and attempts under way
			pg.Kill()
			time.Sleep(time.Second)
			pg.StartAgain()
		}()
		submitAll(t, procs, ids, "e2e_load", 16)
		<-faulted
		for _, id := range ids {
			settledState(t, procs, id)
		}
		if srv.exited() {
			t.Fatalf("serve exited: %v", srv.err)
		}
		// For server_login_retry after a failed login PgBouncer refuses
		// its clients (503 from the API, with Retry-After): wait it out.
		clocktest.EventuallyShows(t, "/readyz to recover", func() (bool, string) {
			res := srv.call(t, http.MethodGet, "/readyz", "", nil)
			return res.Status == http.StatusOK, res.String()
		})
		checkOutcomes(t, srv, prov, ids, "accepted", 3)
		if errs := metricValue(t, srv, "reviewledger_engine_store_errors_total"); errs == 0 {
			t.Error("the engine saw no store error: the fault missed the reviews in flight")
		}
		checkLedger(t, srv)
		if strings.Contains(srv.logs.String(), "prepared statements go missing") {
			t.Errorf("prepared statements went missing through PgBouncer:\n%s", srv.logs.String())
		}
	})
}

// checkLedger checks, through the server's configuration, that the
// projections catch up, the manual queue is empty and audit verify
// passes.
func checkLedger(t *testing.T, srv *serveProc) {
	t.Helper()
	clocktest.EventuallyShows(t, "the projections to catch up", func() (bool, string) { return caughtUp(t, srv) })
	if items := srv.queue(t, "?limit=1000"); len(items) != 0 {
		t.Errorf("%d reviews in the manual queue", len(items))
	}
	code, out, errOut := srv.cli(t, "audit", "verify")
	if code != 0 || strings.Contains(out, "DAMAGED") {
		t.Fatalf("audit verify: exit %d\n%s%s", code, out, errOut)
	}
	clocktest.EventuallyShows(t, "/readyz", func() (bool, string) {
		res := srv.call(t, http.MethodGet, "/readyz", "", nil)
		return res.Status == http.StatusOK, res.String()
	})
}

// sampleSessions runs load and returns the most client sessions the
// server of url held (this one's own aside) while it ran.
func sampleSessions(t *testing.T, url string, load func()) int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	done := make(chan struct{})
	var (
		wg   sync.WaitGroup
		peak int
	)
	wg.Go(func() {
		for {
			var n int
			err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE backend_type = 'client backend' AND datname = current_database() AND pid <> pg_backend_pid()`).Scan(&n)
			if err != nil {
				t.Errorf("count sessions: %v", err)
				return
			}
			peak = max(peak, n)
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	load()
	close(done)
	wg.Wait()
	return peak
}
