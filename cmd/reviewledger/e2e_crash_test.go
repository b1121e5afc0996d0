package main

import (
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// TestE2ECrash: serve is killed (SIGKILL) while attempts are in flight, a
// retry is waiting and a review's deadline passes with no server up; a new
// serve on the same database finishes every review exactly once. Run with
// each dispatch backend: in-process, PostgreSQL and NATS JetStream (where
// NATS is up).
func TestE2ECrash(t *testing.T) {
	t.Parallel()
	for _, pubsub := range []string{"gochannel", "postgres", "nats"} {
		t.Run(pubsub, func(t *testing.T) {
			t.Parallel()
			if pubsub == "nats" {
				natsAvailable(t)
			}
			testCrash(t, pubsub)
		})
	}
}

func testCrash(t *testing.T, pubsub string) {
	prov := newScriptedProvider(t)
	// A database with no tables: serve applies the migrations.
	env := baseServeEnv(t, blankDatabase(t), prov.URL())
	env["REVIEWLEDGER_PUBSUB"] = pubsub
	if pubsub == "nats" {
		env["REVIEWLEDGER_WORK_TOPIC"] = natsTopic(t, "crash")
	}
	first := startServe(t, env)
	prov.setTarget(first.URL)

	// The first step answers attempt 1, on the first server; the others
	// answer the attempts the second server makes.
	reviews := []struct {
		id, class string
		steps     []step
		inFlight  bool   // attempt 1 is in flight at the kill
		state     string // once the second server is done
		// closedAs is how attempt 1 must be closed: worker_lost for a call
		// lost with its process; deadline_exceeded for an attempt waiting
		// for its callback, which outlives the process that made the call
		// (the wait is in the review's work record) and ends at its timeout.
		closedAs string
	}{
		{"e2e-crash-accept", "e2e_crash", []step{hang(), accept()}, true, "accepted", "worker_lost"},
		{"e2e-crash-reject", "e2e_crash", []step{hang(), finding("rejected", "crash test")}, true, "rejected", "worker_lost"},
		{"e2e-crash-refused", "e2e_crash", []step{hang(), status(http.StatusBadRequest, "")}, true, "manual_review", "worker_lost"},
		{"e2e-crash-hang", "e2e_crash", []step{hang()}, true, "manual_review", "worker_lost"},
		{"e2e-crash-async", "e2e_crash", []step{async(""), accept()}, true, "accepted", "deadline_exceeded"},
		// Killed between attempts, while waiting out a Retry-After.
		{"e2e-crash-backoff", "e2e_crash", []step{status(http.StatusTooManyRequests, "5"), accept()}, false, "accepted", ""},
		// Its deadline passes while no server runs: the new one escalates
		// it, with or without closing the attempt first.
		{"e2e-crash-expired", "e2e_crash_short", []step{hang()}, true, "manual_review", ""},
	}
	for _, r := range reviews {
		prov.script(r.id, r.steps...)
		first.submit(t, r.id, r.class, content(r.id))
	}
	clocktest.EventuallyShows(t, "every review's first attempt to be under way", func() (bool, string) {
		for _, r := range reviews {
			if len(prov.seen(r.id)) == 0 {
				return false, r.id + " not seen by the provider"
			}
			if !r.inFlight && len(ofType(first.events(t, r.id), "AttemptTimedOut")) == 0 {
				return false, r.id + " attempt 1 not closed"
			}
		}
		return true, ""
	})
	// The asynchronous review's 202 and the backoff's 429 must have been
	// taken in (both reviews parked) before the kill: a kill while an
	// answer is still on its way to the record leaves that attempt owned,
	// and it is closed as worker_lost, not as the test says.
	clocktest.EventuallyShows(t, "the asynchronous and the backing-off reviews to be parked", func() (bool, string) {
		v := metricValue(t, first, "reviewledger_engine_parked_reviews")
		return v >= 2, fmt.Sprintf("%v parked", v)
	})
	deadlines := map[string]time.Time{}
	for _, r := range reviews {
		v := first.review(t, r.id)
		if v.State != "pending" || v.Attempts != 1 {
			t.Fatalf("before the kill: %+v, want pending in attempt 1", v)
		}
		deadlines[r.id] = v.Deadline
	}
	first.kill(t)

	// Stay down until e2e-crash-expired is past its deadline.
	time.Sleep(time.Until(deadlines["e2e-crash-expired"]) + 100*time.Millisecond)
	second := startServe(t, env)
	prov.setTarget(second.URL)
	resumed := time.Now()

	for _, r := range reviews {
		t.Run(r.id, func(t *testing.T) {
			got := second.waitSettled(t, r.id)
			if got.State != r.state {
				t.Errorf("review %+v, want %s", got, r.state)
			}
			evs := second.events(t, r.id)
			ends := len(ofType(evs, "FindingReceived")) + len(ofType(evs, "Escalated"))
			if ends != 1 {
				t.Errorf("%d findings and escalations, want exactly one end: %v", ends, eventTypes(evs))
			}
			timedOut := ofType(evs, "AttemptTimedOut")
			if r.closedAs != "" && (len(timedOut) == 0 || timedOut[0].field("attempt") != float64(1) || timedOut[0].field("classification") != r.closedAs) {
				t.Errorf("attempt 1 not closed as %s: %v", r.closedAs, eventTypes(evs))
			}
			for _, e := range timedOut {
				if !r.inFlight && e.field("classification") == "worker_lost" {
					t.Errorf("attempt %v closed as worker_lost, but none was in flight", e.field("attempt"))
				}
			}
			// Every attempt started is closed, and nothing follows the end
			// but a moderator's decision.
			started, closed := 0, 0
			for i, e := range evs {
				switch e.Type {
				case "AttemptStarted":
					started++
				case "AttemptTimedOut", "FindingReceived":
					closed++
				case "Escalated":
					closed = started // an escalation ends the attempt in flight
					for _, later := range evs[i+1:] {
						if later.Type != "ManualDecisionRecorded" && later.Type != "ManualApprovalRecorded" {
							t.Errorf("%s after the escalation: %v", later.Type, eventTypes(evs))
						}
					}
				}
			}
			if started != closed || started != got.Attempts {
				t.Errorf("%d attempts started, %d closed, the review counts %d: %v", started, closed, got.Attempts, eventTypes(evs))
			}
			// Nothing stranded: settled by the deadline plus a sweep, or a
			// sweep after the second server came up if the deadline passed
			// while none ran; with slack for a loaded machine.
			bound := deadlines[r.id]
			if resumed.After(bound) {
				bound = resumed
			}
			if last := evs[len(evs)-1]; last.RecordedAt.After(bound.Add(e2eSweep + 5*time.Second)) {
				t.Errorf("settled at %s, long past the deadline %s plus a sweep", last.RecordedAt, deadlines[r.id])
			}
			if got.State == "manual_review" {
				second.waitQueued(t, r.id, r.class)
			}
			calls := prov.seen(r.id)
			if len(calls) != got.Attempts {
				t.Errorf("provider saw %d attempts, the review counts %d", len(calls), got.Attempts)
			}
			for i, c := range calls {
				if c.IdempotencyKey != r.id || c.Attempt != fmt.Sprint(i+1) {
					t.Errorf("call %d: Idempotency-Key %q, X-Review-Attempt %q", i+1, c.IdempotencyKey, c.Attempt)
				}
			}
		})
	}
}

// TestE2ERestart: serve stopped with SIGTERM while attempts are in flight
// exits 0 and leaves those reviews pending (a restart is not a reason to
// escalate); the next serve resumes them. A call in progress is cancelled
// (its attempt closed as cancelled); an attempt waiting for its callback is
// not the process's to cancel: the wait is in the review's work record, and
// the next serve closes it at its timeout (no callback came).
func TestE2ERestart(t *testing.T) {
	t.Parallel()
	prov := newScriptedProvider(t)
	env := baseServeEnv(t, dbtest.URL(t), prov.URL())
	first := startServe(t, env)
	prov.setTarget(first.URL)

	ids := []string{"e2e-restart-hang", "e2e-restart-async"}
	prov.script(ids[0], hang(), accept())
	prov.script(ids[1], async(""), finding("rejected", "after the restart"))
	for _, id := range ids {
		first.submit(t, id, "e2e_crash", content(id))
	}
	clocktest.EventuallyShows(t, "both first attempts to reach the provider", func() (bool, string) {
		return len(prov.seen(ids[0])) == 1 && len(prov.seen(ids[1])) == 1, "not yet"
	})
	// The 202 must have been taken in (the review parked, waiting for its
	// callback) before the stop: a stop while its answer is still on the
	// wire cancels that call like any other.
	clocktest.EventuallyShows(t, "the asynchronous review to be parked", func() (bool, string) {
		v := metricValue(t, first, "reviewledger_engine_parked_reviews")
		return v >= 1, fmt.Sprintf("%v parked", v)
	})
	first.stop(t) // SIGTERM; fails the test unless it exits 0
	if t.Failed() {
		return
	}

	second := startServe(t, env)
	prov.setTarget(second.URL)
	closedAs := []string{"cancelled", "deadline_exceeded"}
	for i, want := range []string{"accepted", "rejected"} {
		id := ids[i]
		got := second.waitSettled(t, id)
		evs := second.events(t, id)
		if got.State != want || got.Attempts != 2 {
			t.Errorf("%s: %+v, want %s after 2 attempts: %v", id, got, want, eventTypes(evs))
			continue
		}
		want := []string{"Submitted", "AttemptStarted", "AttemptTimedOut", "AttemptStarted", "FindingReceived"}
		if !slices.Equal(eventTypes(evs), want) {
			t.Errorf("%s: events %v, want %v", id, eventTypes(evs), want)
			continue
		}
		if c := evs[2].field("classification"); c != closedAs[i] {
			t.Errorf("%s: attempt 1 closed as %v, want %s", id, c, closedAs[i])
		}
	}
}

// TestE2ETwoProcesses: two serve processes start at once on one empty
// database (the migrations run once, under their lock) and share the work
// through the PostgreSQL dispatch: each review is worked once, whichever
// process took it, and reads the same from both.
func TestE2ETwoProcesses(t *testing.T) {
	t.Parallel()
	prov := newScriptedProvider(t)
	env := baseServeEnv(t, blankDatabase(t), prov.URL())
	env["REVIEWLEDGER_PUBSUB"] = "postgres"
	reviewledgerBin(t)
	procs := make([]*serveProc, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range procs {
		wg.Go(func() { procs[i], errs[i] = startServeErr(t, env) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	prov.setTarget(procs[0].URL)

	var ids []string
	for i := range 10 {
		id := fmt.Sprintf("e2e-two-%02d", i)
		ids = append(ids, id)
		procs[i%2].submit(t, id, "e2e_fast", content(id))
	}
	for i, id := range ids {
		other := procs[(i+1)%2]
		got := other.waitSettled(t, id)
		// One attempt the provider answered; before it, only attempts the
		// engine closed unsent because the store took their time (a
		// fresh database's first write can outlast e2e_fast's 1 s).
		evs := other.events(t, id)
		if got.State != "accepted" || got.Attempts != 1+len(unsentAttempts(t, evs)) {
			t.Errorf("%s: %+v, want accepted after one attempt called: %v", id, got, attemptLog(evs))
		}
		if mine := procs[i%2].review(t, id); !reflect.DeepEqual(mine, got) {
			t.Errorf("%s reads %+v from one process and %+v from the other", id, mine, got)
		}
		if n := len(prov.seen(id)); n != 1 {
			t.Errorf("%s: the provider saw %d requests, want 1", id, n)
		}
	}

	// The SLIs count each review once, whichever process worked it: the
	// one running the SLO projection exports them, the other none.
	clocktest.EventuallyShows(t, "the SLIs to count every review", func() (bool, string) {
		fams := []map[string]*dto.MetricFamily{scrape(t, procs[0]), scrape(t, procs[1])}
		good := sumSeries(fams, "reviewledger_review_outcomes_total", map[string]string{"content_class": "e2e_fast", "outcome": "accepted", "within_budget": "true"})
		all := sumSeries(fams, "reviewledger_review_outcomes_total", map[string]string{"content_class": "e2e_fast"})
		attempts := sumSeries(fams, "reviewledger_review_attempt_duration_seconds", map[string]string{"content_class": "e2e_fast", "outcome": "finding"})
		durations := sumSeries(fams, "reviewledger_review_outcome_duration_seconds", map[string]string{"content_class": "e2e_fast"})
		exporting := 0
		for _, f := range fams {
			if f["reviewledger_manual_queue_reviews"] != nil {
				exporting++
			}
		}
		return good == 10 && all == 10 && attempts == 10 && durations == 10 && exporting == 1,
			fmt.Sprintf("within budget %v of %v outcomes, %v attempts, %v durations; %d processes export the queue", good, all, attempts, durations, exporting)
	})
	for _, p := range procs {
		checkMetrics(t, p)
	}
}
