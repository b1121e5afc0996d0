package main

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// TestE2ECrash: serve is killed (SIGKILL) while attempts are in flight; a
// new serve on the same database finishes every review exactly once.
func TestE2ECrash(t *testing.T) {
	t.Parallel()
	prov := newScriptedProvider(t)
	// A database with no tables: serve applies the migrations.
	env := baseServeEnv(t, blankDatabase(t), prov.URL())
	first := startServe(t, env)
	prov.setTarget(first.URL)

	// Attempt 1 of every review hangs until the process dies; the attempts
	// the second server makes are answered differently per review.
	reviews := []struct {
		id    string
		steps []step
		state string // once the second server is done
	}{
		{"e2e-crash-accept", []step{hang(), accept()}, "accepted"},
		{"e2e-crash-reject", []step{hang(), finding("rejected", "crash test")}, "rejected"},
		{"e2e-crash-refused", []step{hang(), status(http.StatusBadRequest, "")}, "manual_review"},
		{"e2e-crash-hang", []step{hang()}, "manual_review"},
	}
	for _, r := range reviews {
		prov.script(r.id, r.steps...)
		first.submit(t, r.id, "e2e_crash", content(r.id))
	}
	eventually(t, "every review's first attempt to reach the provider", func() (bool, string) {
		for _, r := range reviews {
			if len(prov.seen(r.id)) == 0 {
				return false, r.id + " not seen"
			}
		}
		return true, ""
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

	second := startServe(t, env)
	prov.setTarget(second.URL)
	resumed := time.Now()

	for _, r := range reviews {
		t.Run(r.id, func(t *testing.T) {
			// Nothing is stranded: each review is settled by its deadline
			// plus a sweep; the poll allows generous slack beyond that.
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
			if len(timedOut) == 0 || timedOut[0].field("attempt") != float64(1) || timedOut[0].field("classification") != "worker_lost" {
				t.Errorf("attempt 1 not closed as worker_lost: %v", eventTypes(evs))
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
					if started > closed {
						closed = started // an escalation ends the attempt in flight
					}
					for _, later := range evs[i+1:] {
						if later.Type != "ManualDecisionRecorded" && later.Type != "ManualApprovalRecorded" {
							t.Errorf("%s after the escalation: %v", later.Type, eventTypes(evs))
						}
					}
				}
			}
			if started != closed {
				t.Errorf("%d attempts started, %d closed: %v", started, closed, eventTypes(evs))
			}
			// Settled by the deadline plus a sweep, or a sweep after the
			// second server came up if the deadline passed while none ran;
			// with slack for a loaded machine.
			bound := deadlines[r.id]
			if resumed.After(bound) {
				bound = resumed
			}
			if last := evs[len(evs)-1]; last.RecordedAt.After(bound.Add(e2eSweep + 5*time.Second)) {
				t.Errorf("settled at %s, long past the deadline %s plus a sweep", last.RecordedAt, deadlines[r.id])
			}
			if got.State == "manual_review" {
				second.waitQueued(t, r.id, "e2e_crash")
			}
			if n := len(prov.seen(r.id)); n != got.Attempts {
				t.Errorf("provider saw %d attempts, the review counts %d", n, got.Attempts)
			}
			for i, c := range prov.seen(r.id) {
				if c.IdempotencyKey != r.id || c.Attempt != fmt.Sprint(i+1) {
					t.Errorf("call %d: Idempotency-Key %q, X-Review-Attempt %q", i+1, c.IdempotencyKey, c.Attempt)
				}
			}
		})
	}
}
