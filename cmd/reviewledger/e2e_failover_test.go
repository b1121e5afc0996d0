package main

// Failover of the elected roles: the projections and the deadline sweeper
// run in one process at a time (advisory locks); another takes over when
// that one dies.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	dto "github.com/prometheus/client_model/go"

	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
	"github.com/reviewledger/reviewledger/migrations/dbtest/cluster"
	"github.com/reviewledger/reviewledger/projections"
)

// failoverPolicy adds to enginePolicy a class whose reviews the provider
// takes for asynchronous review and never calls back: with no worker left,
// only the deadline sweeper ends them.
const failoverPolicy = enginePolicy + `  e2e_sweep:
    budget: 3s
    attempt_timeout: 3s
    max_attempts: 1
    backoff: {initial: 50ms, max: 500ms, jitter: 50ms}
    on_exhaustion: manual_review
    priority: 1
`

// asyncFor answers 202 (and never calls back) for reviews whose ID starts
// with prefix, and passes every other request to next.
func asyncFor(prefix string, next *loadProvider) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body struct {
			ReviewID string `json:"review_id"`
			Attempt  int    `json:"attempt"`
		}
		if json.Unmarshal(raw, &body) == nil && strings.HasPrefix(body.ReviewID, prefix) {
			next.mu.Lock()
			next.attempts[body.ReviewID] = append(next.attempts[body.ReviewID], body.Attempt)
			next.mu.Unlock()
			w.WriteHeader(http.StatusAccepted)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(raw))
		next.serveHTTP(w, r)
	})
}

// elected reports whether p is the active process of every projection and
// of the sweeper, by its metrics.
func elected(t *testing.T, p *serveProc) (bool, string) {
	fams := []map[string]*dto.MetricFamily{scrape(t, p)}
	var missing []string
	for _, name := range projections.Names() {
		if sumSeries(fams, "reviewledger_projection_active", map[string]string{"projection": name}) != 1 {
			missing = append(missing, name)
		}
	}
	if sumSeries(fams, "reviewledger_engine_sweeper_active", nil) != 1 {
		missing = append(missing, "sweeper")
	}
	return len(missing) == 0, fmt.Sprintf("%s not active in pid %d", strings.Join(missing, ", "), p.cmd.Process.Pid)
}

// checkStatusNames checks that `projections status` names the process
// of pid as the active one of every projection and of the sweeper.
func checkStatusNames(t *testing.T, p *serveProc, pid int) {
	t.Helper()
	code, out, errOut := p.cli(t, "projections", "status")
	if code != 0 {
		t.Fatalf("projections status: exit %d\n%s%s", code, out, errOut)
	}
	mark := fmt.Sprintf(":%d (backend ", pid)
	table, elections, _ := strings.Cut(strings.TrimSpace(out), "\n\n")
	for _, line := range strings.Split(table, "\n")[1:] {
		if !strings.Contains(line, mark) {
			t.Errorf("projections status does not name pid %d as active:\n%s", pid, out)
		}
	}
	if !strings.HasPrefix(elections, "sweeper active: reviewledger ") || !strings.Contains(elections, mark) {
		t.Errorf("projections status does not name pid %d as the sweeper:\n%s", pid, out)
	}
}

// caughtUp reports whether `projections status` shows no lag.
func caughtUp(t *testing.T, p *serveProc) (bool, string) {
	code, out, _ := p.cli(t, "projections", "status")
	table, _, _ := strings.Cut(strings.TrimSpace(out), "\n\n")
	for _, line := range strings.Split(table, "\n")[1:] {
		if f := strings.Fields(line); code != 0 || len(f) < 6 || f[4] != "0" {
			return false, out
		}
	}
	return true, out
}

// TestE2EProjectorFailover: two `serve --roles projector,sweeper`
// processes beside an API and a worker. The first started runs every
// projection and the sweeper, as `projections status` and its metrics
// show; it is killed with SIGKILL under load and the other takes every
// one over (the time it took is logged). Then the worker is killed while
// reviews wait for callbacks: the new sweeper escalates them at their
// deadline. The read models equal a rebuild from the ledger afterwards.
func TestE2EProjectorFailover(t *testing.T) {
	t.Parallel()
	pg := cluster.Start(t)
	dbURL := pg.CreateDatabase("reviewledger")
	prov := &loadProvider{latency: 200 * time.Millisecond, inFlight: map[string]int{}, attempts: map[string][]int{}}
	prov.srv = httptest.NewServer(asyncFor("sweep-", prov))
	t.Cleanup(prov.srv.Close)
	env := loadEnv(t, dbURL, prov.URL())
	policy := filepath.Join(t.TempDir(), "failover-policy.yaml")
	if err := os.WriteFile(policy, []byte(failoverPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	env["REVIEWLEDGER_POLICY"] = policy
	env["REVIEWLEDGER_PUBSUB"] = "postgres"
	withRoles := func(roles string) map[string]string {
		return merged(env, map[string]string{"REVIEWLEDGER_ROLES": roles})
	}

	api := startServe(t, withRoles("api"))
	// The worker leaves the sweeper to the projector/sweeper processes,
	// whose failover this test is about.
	worker := startServe(t, merged(withRoles("worker"), map[string]string{"REVIEWLEDGER_WORKER_SWEEPS": "false"}))
	active := startServe(t, withRoles("projector,sweeper"))
	clocktest.EventuallyShows(t, "the first projector to be elected for everything", func() (bool, string) { return elected(t, active) })
	standby := startServe(t, withRoles("projector,sweeper"))
	if ok, _ := elected(t, standby); ok {
		t.Fatal("the standby is active too")
	}
	checkStatusNames(t, api, active.cmd.Process.Pid)

	// Under load: the active projector dies mid-run.
	ids := reviewIDs("failover", 150)
	done := make(chan struct{})
	go func() {
		defer close(done)
		submitAll(t, []*serveProc{api}, ids, "e2e_load", 8)
	}()
	time.Sleep(time.Second)
	active.kill(t)
	killed := time.Now()
	clocktest.WithinShows(t, e2eWait, "the standby to take over after the kill", func() (bool, string) { return elected(t, standby) })
	t.Logf("projections and sweeper taken over %s after the SIGKILL of the active process", time.Since(killed).Round(10*time.Millisecond))
	checkStatusNames(t, api, standby.cmd.Process.Pid)
	<-done
	for _, id := range ids {
		settledState(t, []*serveProc{api}, id)
	}
	checkOutcomes(t, api, prov, ids, "accepted", 3)

	// The worker dies while reviews wait for callbacks: only the new
	// sweeper can end them.
	swept := reviewIDs("sweep-failover", 5)
	submitAll(t, []*serveProc{api}, swept, "e2e_sweep", 5)
	clocktest.EventuallyShows(t, "the provider to take every review for asynchronous review", func() (bool, string) {
		for _, id := range swept {
			if len(prov.calls(id)) == 0 {
				return false, id + " not seen"
			}
		}
		return true, ""
	})
	worker.kill(t)
	for _, id := range swept {
		v := settledState(t, []*serveProc{api}, id)
		evs := api.events(t, id)
		esc := ofType(evs, "Escalated")
		if v.State != "manual_review" || len(esc) != 1 || esc[0].field("reason") != "deadline_passed" {
			t.Errorf("%s: %+v, want escalated once as deadline_passed: %v", id, v, attemptLog(evs))
		}
	}
	if n := sumSeries([]map[string]*dto.MetricFamily{scrape(t, standby)}, "reviewledger_engine_swept_reviews_total", nil); n < float64(len(swept)) {
		t.Errorf("the new sweeper swept %v reviews, want at least %d", n, len(swept))
	}

	// The read models the two processes built equal a rebuild.
	checkRebuildEqual(t, api, dbURL)
}

// checkRebuildEqual waits for p's projections to catch up, then checks
// that the read models on dbURL equal what `projections rebuild` makes of
// the ledger.
func checkRebuildEqual(t *testing.T, p *serveProc, dbURL string) {
	t.Helper()
	clocktest.EventuallyShows(t, "the projections to catch up", func() (bool, string) { return caughtUp(t, p) })
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	defer cancel()
	pool, err := pgxpool.New(ctx, withPoolMax(t, dbURL, 2))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	before, err := projections.Dump(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := p.cli(t, "projections", "rebuild"); code != 0 {
		t.Fatalf("projections rebuild: exit %d\n%s%s", code, out, errOut)
	}
	after, err := projections.Dump(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	for table, rows := range after {
		if !reflect.DeepEqual(rows, before[table]) {
			t.Errorf("table %s after the rebuild: %d rows, before %d\nafter:  %.400v\nbefore: %.400v", table, len(rows), len(before[table]), rows, before[table])
		}
	}
}
