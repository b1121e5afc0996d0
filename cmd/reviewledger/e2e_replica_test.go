package main

// Reads from a streaming replica (REVIEWLEDGER_READ_DATABASE_URL).

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
	"github.com/reviewledger/reviewledger/migrations/dbtest/cluster"
	"github.com/reviewledger/reviewledger/projections"
)

// readyReplica reads /readyz's report of the replica.
func readyReplica(t *testing.T, p *serveProc) projections.ReplicaStatus {
	t.Helper()
	v := decode[struct {
		ReadReplica *projections.ReplicaStatus `json:"read_replica"`
	}](t, p.expect(t, http.StatusOK, http.MethodGet, "/readyz", "", nil))
	if v.ReadReplica == nil {
		t.Fatal("/readyz reports no read replica")
	}
	return *v.ReadReplica
}

// replayPaused pauses (or resumes) the replica's WAL replay.
func replayPaused(t *testing.T, replicaURL string, paused bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	defer cancel()
	conn, err := pgx.Connect(ctx, replicaURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	fn := "pg_wal_replay_resume()"
	if paused {
		fn = "pg_wal_replay_pause()"
	}
	if _, err := conn.Exec(ctx, "SELECT "+fn); err != nil {
		t.Fatal(err)
	}
}

// projectedOnPrimary waits until the projections have written id's rows
// on the primary at dbURL: it is in the manual queue there, and every
// projection has applied every event of the ledger.
func projectedOnPrimary(t *testing.T, dbURL, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clocktest.Wait)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	clocktest.EventuallyShows(t, "the projections to write "+id+"'s rows on the primary", func() (bool, string) {
		var behind int
		var queued bool
		if err := conn.QueryRow(ctx, `SELECT
				(SELECT count(*) FROM projection_checkpoint WHERE events < (SELECT count(*) FROM event)),
				EXISTS (SELECT 1 FROM manual_queue WHERE review_id = $1)`, id).Scan(&behind, &queued); err != nil {
			t.Fatal(err)
		}
		return behind == 0 && queued, fmt.Sprintf("%d projections behind the ledger, %s in the manual queue: %v", behind, id, queued)
	})
}

// auditedReviews runs audit verify and returns how many reviews it
// checked; it must find them intact.
func auditedReviews(t *testing.T, p *serveProc) (n int, stderr string) {
	t.Helper()
	code, out, errOut := p.cli(t, "audit", "verify")
	if code != 0 || !strings.Contains(out, "intact") {
		t.Fatalf("audit verify: exit %d\n%s%s", code, out, errOut)
	}
	_, summary, _ := strings.Cut(out, "audit verify: ")
	if _, err := fmt.Sscanf(summary, "%d reviews", &n); err != nil {
		t.Fatalf("audit verify: %v\n%s", err, out)
	}
	return n, errOut
}

// TestE2EReadReplica: serve on a private primary with a streaming replica
// of it (pg_basebackup) as REVIEWLEDGER_READ_DATABASE_URL. With the
// replica's replay paused, the manual queue's list, the SLO and audit
// verify show the replica's older state, while a review's view and
// events, claims and decisions, on the primary, show every write at once;
// /readyz reports the replay lag. Once the replica is stopped, every read
// still answers, from the primary, and /readyz says so.
func TestE2EReadReplica(t *testing.T) {
	t.Parallel()
	pg := cluster.Start(t)
	dbURL := pg.CreateDatabase("reviewledger")
	replica := pg.Replica()
	replicaURL := replica.URL("reviewledger")
	prov := newScriptedProvider(t)
	env := baseServeEnv(t, dbURL, prov.URL())
	env["REVIEWLEDGER_READ_DATABASE_URL"] = withPoolMax(t, replicaURL, 4)
	env["REVIEWLEDGER_READ_MAX_LAG"] = "5m" // replay is paused for a while below
	srv := startServe(t, env)
	prov.setTarget(srv.URL)

	queuedIDs := func() []string {
		var ids []string
		for _, it := range srv.queue(t, "?limit=1000") {
			ids = append(ids, it.ReviewID)
		}
		return ids
	}
	escalate := func(id string) {
		prov.script(id, status(http.StatusBadRequest, ""))
		srv.submit(t, id, "e2e_fast", content(id))
		if v := srv.waitSettled(t, id); v.State != "manual_review" {
			t.Fatalf("%s: %+v, want manual_review", id, v)
		}
	}
	escalate("replica-1")
	clocktest.EventuallyShows(t, "reads to go to the replica and show the first review", func() (bool, string) {
		st := readyReplica(t, srv)
		ids := queuedIDs()
		return st.Serving == projections.ServingReplica && st.Up && len(ids) == 1, fmt.Sprintf("%+v, queue %v", st, ids)
	})
	if n, _ := auditedReviews(t, srv); n != 1 {
		t.Fatalf("audit verify checked %d reviews, want 1", n)
	}

	// Replay paused: the replica stays where it is.
	replayPaused(t, replicaURL, true)
	escalate("replica-2")
	projectedOnPrimary(t, dbURL, "replica-2")
	if ids := queuedIDs(); len(ids) != 1 || ids[0] != "replica-1" {
		t.Errorf("manual queue with replay paused: %v, want only replica-1 (read from the replica)", ids)
	}
	slo := decode[sloView](t, srv.expect(t, http.StatusOK, http.MethodGet, "/v1/slo?window=1h", tokAuditor, nil))
	if slo.Total != 1 {
		t.Errorf("SLO with replay paused counts %d reviews, want 1 (read from the replica)", slo.Total)
	}
	srv.expect(t, http.StatusOK, http.MethodGet, "/v1/slo/series?window=1h&step=5m", tokAuditor, nil)
	if n, _ := auditedReviews(t, srv); n != 1 {
		t.Errorf("audit verify with replay paused checked %d reviews, want 1 (read from the replica)", n)
	}
	if st := readyReplica(t, srv); st.Serving != projections.ServingReplica || st.LagBytes == 0 {
		t.Errorf("/readyz with replay paused: %+v, want the replica serving with a replay lag", st)
	}
	// What must read its own writes is on the primary.
	if evs := srv.events(t, "replica-2"); len(ofType(evs, "Escalated")) != 1 {
		t.Errorf("replica-2's events: %v", eventTypes(evs))
	}
	srv.expect(t, http.StatusOK, http.MethodPost, "/v1/manual-queue/replica-2/claim", tokModerator, nil)
	v := srv.review(t, "replica-1")
	srv.expect(t, http.StatusOK, http.MethodPost, "/v1/reviews/replica-1/decision", tokModerator,
		map[string]any{"state": "rejected", "note": "decided while the replica lags", "expected_version": v.Version})
	if v := srv.review(t, "replica-1"); v.State != "rejected" {
		t.Errorf("replica-1 after its decision: %+v", v)
	}

	replayPaused(t, replicaURL, false)
	clocktest.EventuallyShows(t, "the replica to catch up", func() (bool, string) {
		st := readyReplica(t, srv)
		ids := queuedIDs()
		return st.LagBytes == 0 && len(ids) == 1 && ids[0] == "replica-2", fmt.Sprintf("%+v, queue %v", st, ids)
	})
	if it, _ := queued(srv.queue(t, "?limit=1000"), "replica-2"); it.ClaimedBy == nil || *it.ClaimedBy != "mona" {
		t.Errorf("replica-2's claim, read from the replica: %+v", it)
	}

	// The replica stops: the primary answers every read.
	replica.Stop()
	escalate("replica-3")
	clocktest.EventuallyShows(t, "the queue, from the primary, to show replica-3", func() (bool, string) {
		ids := queuedIDs()
		return len(ids) == 2, fmt.Sprint(ids)
	})
	srv.expect(t, http.StatusOK, http.MethodGet, "/v1/slo?window=1h", tokAuditor, nil)
	srv.expect(t, http.StatusOK, http.MethodGet, "/v1/slo/series?window=1h&step=5m", tokAuditor, nil)
	if st := readyReplica(t, srv); st.Serving != projections.ServingPrimary || st.Up {
		t.Errorf("/readyz with the replica stopped: %+v, want the primary serving", st)
	}
	if n, stderr := auditedReviews(t, srv); n != 3 || !strings.Contains(stderr, "verifying on the primary") {
		t.Errorf("audit verify with the replica stopped checked %d reviews, want 3 on the primary; stderr:\n%s", n, stderr)
	}

	// Started again, it serves the read models again.
	replica.StartAgain()
	clocktest.EventuallyShows(t, "reads to go back to the replica", func() (bool, string) {
		st := readyReplica(t, srv)
		return st.Serving == projections.ServingReplica && len(queuedIDs()) == 2, fmt.Sprintf("%+v", st)
	})
}
