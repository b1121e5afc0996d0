package runner

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/api/provider"
	"github.com/reviewledger/reviewledger/domain"
)

// Each row of the DESIGN 5.4 table, and each exit of the control path, on
// a deterministic clock.
func TestControlPath(t *testing.T) {
	t.Parallel()
	const id = "rev-1"
	cases := []struct {
		name   string
		class  string
		steps  []step
		tweak  func(*Config)
		state  domain.State
		events []string
	}{
		{name: "200 accepted", class: "c", steps: []step{finding(id, domain.DecisionAccepted)},
			state: domain.StateAccepted, events: []string{"Submitted", "AttemptStarted", "FindingReceived:accepted:response"}},
		{name: "200 rejected", class: "c", steps: []step{finding(id, domain.DecisionRejected, "nope")},
			state: domain.StateRejected, events: []string{"Submitted", "AttemptStarted", "FindingReceived:rejected:response"}},
		{name: "200 invalid state, then valid", class: "c", steps: []step{finding(id, "maybe"), finding(id, domain.DecisionAccepted)},
			state: domain.StateAccepted, events: []string{"Submitted", "AttemptStarted", "AttemptTimedOut:invalid_finding", "AttemptStarted", "FindingReceived:accepted:response"}},
		{name: "200 mismatched review id is never a decision", class: "c", steps: []step{finding("other", domain.DecisionAccepted)},
			state: domain.StateManualReview, events: []string{"Submitted",
				"AttemptStarted", "AttemptTimedOut:invalid_finding", "AttemptStarted", "AttemptTimedOut:invalid_finding",
				"AttemptStarted", "AttemptTimedOut:invalid_finding", "Escalated:attempts_exhausted"}},
		{name: "200 empty finding", class: "c", steps: []step{{latency: time.Millisecond, result: provider.Result{Outcome: provider.OutcomeFinding}}, finding(id, domain.DecisionRejected)},
			state: domain.StateRejected, events: []string{"Submitted", "AttemptStarted", "AttemptTimedOut:invalid_finding", "AttemptStarted", "FindingReceived:rejected:response"}},
		{name: "429 then 200", class: "c", steps: []step{failure(domain.ClassRateLimited, 0), finding(id, domain.DecisionAccepted)},
			state: domain.StateAccepted, events: []string{"Submitted", "AttemptStarted", "AttemptTimedOut:rate_limited", "AttemptStarted", "FindingReceived:accepted:response"}},
		{name: "429 with Retry-After past the deadline", class: "c", steps: []step{failure(domain.ClassRateLimited, 30*time.Second)},
			state: domain.StateManualReview, events: []string{"Submitted", "AttemptStarted", "AttemptTimedOut:rate_limited", "Escalated:budget_exhausted"}},
		{name: "503 then 200", class: "c", steps: []step{failure(domain.ClassProviderUnavailable, 0), finding(id, domain.DecisionAccepted)},
			state: domain.StateAccepted, events: []string{"Submitted", "AttemptStarted", "AttemptTimedOut:provider_unavailable", "AttemptStarted", "FindingReceived:accepted:response"}},
		{name: "400 is not retried", class: "c", steps: []step{failure(domain.ClassProviderRefused, 0)},
			state: domain.StateManualReview, events: []string{"Submitted", "AttemptStarted", "AttemptTimedOut:provider_refused", "Escalated:provider_refused"}},
		{name: "5xx until attempts run out", class: "c", steps: []step{failure(domain.ClassProviderUnavailable, 0)},
			state: domain.StateManualReview, events: []string{"Submitted",
				"AttemptStarted", "AttemptTimedOut:provider_unavailable", "AttemptStarted", "AttemptTimedOut:provider_unavailable",
				"AttemptStarted", "AttemptTimedOut:provider_unavailable", "Escalated:attempts_exhausted"}},
		{name: "transport error then 200", class: "c", steps: []step{failure(domain.ClassTransportError, 0), finding(id, domain.DecisionRejected)},
			state: domain.StateRejected, events: []string{"Submitted", "AttemptStarted", "AttemptTimedOut:transport_error", "AttemptStarted", "FindingReceived:rejected:response"}},
		{name: "hang past every timeout", class: "c", steps: []step{hang},
			state: domain.StateManualReview, events: []string{"Submitted",
				"AttemptStarted", "AttemptTimedOut:deadline_exceeded", "AttemptStarted", "AttemptTimedOut:deadline_exceeded",
				"AttemptStarted", "AttemptTimedOut:deadline_exceeded", "Escalated:attempts_exhausted"}},
		{name: "budget runs out before attempts", class: "short", steps: []step{hang},
			state: domain.StateManualReview, events: []string{"Submitted",
				"AttemptStarted", "AttemptTimedOut:deadline_exceeded", "AttemptStarted", "AttemptTimedOut:deadline_exceeded",
				"Escalated:budget_exhausted"}},
		{name: "fail-closed class is rejected on exhaustion", class: "closed", steps: []step{failure(domain.ClassProviderUnavailable, 0)},
			state: domain.StateRejected, events: []string{"Submitted",
				"AttemptStarted", "AttemptTimedOut:provider_unavailable", "AttemptStarted", "AttemptTimedOut:provider_unavailable",
				"AttemptStarted", "AttemptTimedOut:provider_unavailable", "Escalated:attempts_exhausted"}},
		{name: "human gate holds an accept", class: "gated", steps: []step{finding(id, domain.DecisionAccepted)},
			state: domain.StateManualReview, events: []string{"Submitted", "AttemptStarted", "FindingReceived:accepted:response", "Escalated:human_gate"}},
		{name: "human gate lets a reject through", class: "gated", steps: []step{finding(id, domain.DecisionRejected)},
			state: domain.StateRejected, events: []string{"Submitted", "AttemptStarted", "FindingReceived:rejected:response"}},
		{name: "202 without a callback times out", class: "c", steps: []step{{latency: toTimeout, result: provider.Result{Outcome: provider.OutcomeAccepted}}, finding(id, domain.DecisionAccepted)},
			state: domain.StateAccepted, events: []string{"Submitted", "AttemptStarted", "AttemptTimedOut:deadline_exceeded", "AttemptStarted", "FindingReceived:accepted:response"}},
		{name: "retry budget spent", class: "c", steps: []step{failure(domain.ClassProviderUnavailable, 0)},
			tweak: func(c *Config) { c.RetryBudget, c.RetryBudgetMinRetries = 0.01, 1 },
			state: domain.StateManualReview, events: []string{"Submitted",
				"AttemptStarted", "AttemptTimedOut:provider_unavailable", "AttemptStarted", "AttemptTimedOut:provider_unavailable",
				"Escalated:retry_budget_exhausted"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var tweaks []func(*Config)
			if c.tweak != nil {
				tweaks = append(tweaks, c.tweak)
			}
			h := newHarness(t, c.steps, tweaks...)
			rv := h.run(t, id, c.class)
			if rv.State() != c.state {
				t.Errorf("state = %s, want %s", rv.State(), c.state)
			}
			if got := h.types(t, id); !slices.Equal(got, c.events) {
				t.Errorf("events:\n got %v\nwant %v", got, c.events)
			}
			// Attempts are numbered from 1, never above max_attempts, each
			// with the review ID as its identity.
			for i, req := range h.prov.Requests() {
				if req.Attempt != i+1 || req.ReviewID != id {
					t.Errorf("request %d = attempt %d review %q", i, req.Attempt, req.ReviewID)
				}
			}
			if n := len(h.prov.Requests()); n > rv.Policy().MaxAttempts {
				t.Errorf("%d provider calls, max_attempts %d", n, rv.Policy().MaxAttempts)
			}
			if h.InFlight() != 0 {
				t.Errorf("InFlight = %d after the run", h.InFlight())
			}
		})
	}
}

// Each attempt's timeout is min(attempt_timeout, remaining), and no wait
// between attempts reaches the deadline.
func TestAttemptTimeoutsFollowTheDeadline(t *testing.T) {
	t.Parallel()
	h := newHarness(t, []step{hang})
	rv := h.run(t, "rev-short", "short")
	var timeouts []int64
	for _, e := range h.events(t, "rev-short") {
		if a, ok := e.(domain.AttemptStarted); ok {
			timeouts = append(timeouts, a.AttemptTimeoutMS)
			if a.AttemptTimeoutMS > a.RemainingBudgetMS || a.AttemptTimeoutMS > 2000 {
				t.Errorf("attempt %d: timeout %dms with %dms remaining", a.Attempt, a.AttemptTimeoutMS, a.RemainingBudgetMS)
			}
		}
	}
	if len(timeouts) != 2 || timeouts[0] != 2000 || timeouts[1] >= 1000 {
		t.Errorf("attempt timeouts = %v, want 2000 then the ~900ms left", timeouts)
	}
	if end := h.clock.Now(); end.After(rv.Deadline()) {
		t.Errorf("review ran until %s, past its deadline %s", end, rv.Deadline())
	}
}

// A Retry-After within the budget is waited out; the backoff applies
// otherwise.
func TestRetryAfterIsHonoured(t *testing.T) {
	t.Parallel()
	h := newHarness(t, []step{failure(domain.ClassRateLimited, 3*time.Second), finding("rev-ra", domain.DecisionAccepted)})
	h.run(t, "rev-ra", "c")
	sleeps := h.clock.Sleeps()
	if len(sleeps) != 1 || sleeps[0] != 3*time.Second {
		t.Fatalf("waits = %v, want the 3s Retry-After", sleeps)
	}
	h2 := newHarness(t, []step{failure(domain.ClassProviderUnavailable, 0), failure(domain.ClassProviderUnavailable, 0), finding("rev-b", domain.DecisionAccepted)})
	h2.run(t, "rev-b", "c")
	sleeps = h2.clock.Sleeps()
	if len(sleeps) != 2 || sleeps[0] < 100*time.Millisecond || sleeps[0] >= 150*time.Millisecond ||
		sleeps[1] < 200*time.Millisecond || sleeps[1] >= 250*time.Millisecond {
		t.Fatalf("waits = %v, want 100ms and 200ms plus jitter under 50ms", sleeps)
	}
}

// A synchronous answer that comes after the attempt's timeout is a
// conflicting completion: counted, never committed.
func TestLateResponseIsAConflict(t *testing.T) {
	t.Parallel()
	late := finding("rev-late", domain.DecisionAccepted)
	late.latency = 3 * time.Second // past the 2s attempt timeout
	h := newHarness(t, []step{late, finding("rev-late", domain.DecisionRejected)})
	rv := h.run(t, "rev-late", "c")
	if rv.State() != domain.StateRejected {
		t.Fatalf("state = %s, want the second attempt's rejected", rv.State())
	}
	want := []string{"Submitted", "AttemptStarted", "AttemptTimedOut:deadline_exceeded", "AttemptStarted", "FindingReceived:rejected:response"}
	if got := h.types(t, "rev-late"); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	if n := h.counter(t, h.metrics.conflicts.WithLabelValues("response")); n != 1 {
		t.Errorf("conflicting completions = %v, want 1", n)
	}
	if got, want := h.conflicts(t, "rev-late"), []string{"response:attempt_not_in_flight:1"}; !slices.Equal(got, want) {
		t.Errorf("recorded conflicts %v, want %v", got, want)
	}
}

// 202 and a callback within the attempt: the callback decides, the waiting
// attempt learns of it at once.
func TestAsyncCallbackOnTime(t *testing.T) {
	t.Parallel()
	var h *harness
	async := step{latency: 10 * time.Millisecond, result: provider.Result{Outcome: provider.OutcomeAccepted},
		then: func(req provider.Request) {
			go func() {
				hdr, body := h.signedCallback(req.ReviewID, req.Attempt, "rejected", "msg-1")
				if err := h.HandleCallback(context.Background(), req.ReviewID, hdr, body); err != nil {
					t.Errorf("HandleCallback = %v", err)
				}
			}()
		}}
	h = newHarness(t, []step{async})
	rv := h.run(t, "rev-async", "c")
	if rv.State() != domain.StateRejected {
		t.Fatalf("state = %s", rv.State())
	}
	want := []string{"Submitted", "AttemptStarted", "FindingReceived:rejected:callback"}
	if got := h.types(t, "rev-async"); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	// The same webhook delivered again changes nothing and is answered as
	// applied.
	hdr, body := h.signedCallback("rev-async", 1, "rejected", "msg-1")
	if err := h.HandleCallback(context.Background(), "rev-async", hdr, body); err != nil {
		t.Fatalf("redelivery = %v, want nil", err)
	}
	if n := len(h.events(t, "rev-async")); n != 3 {
		t.Fatalf("%d events after redelivery", n)
	}
}

// A callback after its attempt timed out, or for an attempt not in flight,
// or after the review was decided, is a conflicting completion.
func TestCallbackConflicts(t *testing.T) {
	t.Parallel()
	h := newHarness(t, []step{{latency: toTimeout, result: provider.Result{Outcome: provider.OutcomeAccepted}}, hang})
	h.submit(t, "rev-cb", "c")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	// Attempt 1 times out without a callback; attempt 2 hangs: cancel
	// the run while it does (escalation, reason cancelled).
	h.prov.steps[1].then = func(provider.Request) {
		// Attempt 1's callback arrives now, late.
		hdr, body := h.signedCallback("rev-cb", 1, "accepted", "late-1")
		if err := h.HandleCallback(context.Background(), "rev-cb", hdr, body); !errors.Is(err, ErrConflictingCompletion) {
			t.Errorf("late callback = %v, want ErrConflictingCompletion", err)
		}
		cancel()
	}
	go func() { done <- h.Review(ctx, "rev-cb") }()
	if err := <-done; err != nil {
		t.Fatalf("Review = %v", err)
	}
	rv := h.load(t, "rev-cb")
	if rv.State() != domain.StateManualReview || rv.EscalationReason() != domain.ReasonCancelled {
		t.Fatalf("state %s reason %s, want manual_review cancelled", rv.State(), rv.EscalationReason())
	}
	want := []string{"Submitted", "AttemptStarted", "AttemptTimedOut:deadline_exceeded", "AttemptStarted", "AttemptTimedOut:cancelled", "Escalated:cancelled"}
	if got := h.types(t, "rev-cb"); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	// After the escalation, a callback for the last attempt conflicts too.
	hdr, body := h.signedCallback("rev-cb", 2, "accepted", "late-2")
	if err := h.HandleCallback(context.Background(), "rev-cb", hdr, body); !errors.Is(err, ErrConflictingCompletion) {
		t.Fatalf("callback after escalation = %v", err)
	}
	// Redelivery of a refused webhook is refused again, and counted.
	if err := h.HandleCallback(context.Background(), "rev-cb", hdr, body); !errors.Is(err, ErrConflictingCompletion) {
		t.Fatalf("redelivered conflicting callback = %v", err)
	}
	if n := h.counter(t, h.metrics.conflicts.WithLabelValues("callback")); n != 3 {
		t.Errorf("callback conflicts = %v, want 3", n)
	}
	if got := len(h.events(t, "rev-cb")); got != len(want) {
		t.Errorf("conflicts changed the history: %d events", got)
	}
	wantConflicts := []string{"callback:attempt_not_in_flight:1", "callback:review_moved_on:2", "callback:duplicate_delivery:2"}
	if got := h.conflicts(t, "rev-cb"); !slices.Equal(got, wantConflicts) {
		t.Errorf("recorded conflicts %v, want %v", got, wantConflicts)
	}
}

func TestCallbackErrors(t *testing.T) {
	t.Parallel()
	h := newHarness(t, []step{hang})
	h.submit(t, "rev-e", "c")
	ctx := context.Background()
	hdr, body := h.signedCallback("rev-e", 1, "accepted", "w1")
	hdr.Set(provider.HeaderWebhookSignature, "v1,AAAA")
	if err := h.HandleCallback(ctx, "rev-e", hdr, body); !errors.Is(err, provider.ErrInvalidSignature) {
		t.Errorf("bad signature = %v", err)
	}
	hdr, body = h.signedCallback("rev-e", 1, "accepted", "w2")
	h.clock.Advance(6 * time.Minute)
	if err := h.HandleCallback(ctx, "rev-e", hdr, body); !errors.Is(err, provider.ErrInvalidSignature) {
		t.Errorf("stale signature = %v", err)
	}
	hdr, body = h.signedCallback("nobody", 1, "accepted", "w3")
	if err := h.HandleCallback(ctx, "nobody", hdr, body); !errors.Is(err, domain.ErrReviewNotFound) {
		t.Errorf("unknown review = %v", err)
	}
	for i, b := range []string{`not json`, `{"review_id":"rev-e","attempt":1,"state":"maybe"}`, `{"review_id":"other","attempt":1,"state":"accepted"}`, `{"review_id":"rev-e","state":"accepted"}`} {
		hdr := make(map[string][]string)
		h.signer.SignHeader(hdr, "bad-"+itoa(i), h.clock.Now(), []byte(b))
		if err := h.HandleCallback(ctx, "rev-e", hdr, []byte(b)); !errors.Is(err, domain.ErrInvalidFinding) {
			t.Errorf("body %s = %v, want ErrInvalidFinding", b, err)
		}
		if err := h.HandleCallback(ctx, "rev-e", hdr, []byte(b)); !errors.Is(err, domain.ErrInvalidFinding) {
			t.Errorf("body %s delivered again = %v, want ErrInvalidFinding", b, err)
		}
	}
	// No attempt in flight: conflicting.
	hdr, body = h.signedCallback("rev-e", 1, "accepted", "w4")
	if err := h.HandleCallback(ctx, "rev-e", hdr, body); !errors.Is(err, ErrConflictingCompletion) {
		t.Errorf("no attempt in flight = %v", err)
	}
	if n := len(h.events(t, "rev-e")); n != 1 {
		t.Errorf("%d events, want only Submitted", n)
	}
}

// A graceful shutdown leaves the review pending (its attempt closed as
// cancelled) for the next start.
func TestShutdownLeavesReviewPending(t *testing.T) {
	t.Parallel()
	h := newHarness(t, []step{hang, finding("rev-s", domain.DecisionAccepted)})
	h.submit(t, "rev-s", "c")
	ctx, cancel := context.WithCancelCause(context.Background())
	h.prov.steps[0].latency = time.Millisecond
	h.prov.steps[0].then = func(provider.Request) { cancel(ErrShutdown) }
	if err := h.Review(ctx, "rev-s"); !errors.Is(err, ErrShutdown) {
		t.Fatalf("Review = %v, want ErrShutdown", err)
	}
	rv := h.load(t, "rev-s")
	if rv.State() != domain.StatePending {
		t.Fatalf("state = %s, want pending", rv.State())
	}
	// The next start resumes it.
	if err := h.Review(context.Background(), "rev-s"); err != nil {
		t.Fatal(err)
	}
	want := []string{"Submitted", "AttemptStarted", "AttemptTimedOut:cancelled", "AttemptStarted", "FindingReceived:accepted:response"}
	if got := h.types(t, "rev-s"); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
}

// An attempt left in flight by a dead worker is closed as worker_lost once
// its timeout has passed, then retried.
func TestWorkerLostAttemptIsClosed(t *testing.T) {
	t.Parallel()
	h := newHarness(t, []step{finding("rev-w", domain.DecisionAccepted)})
	rv := h.submit(t, "rev-w", "c")
	st, err := rv.StartAttempt(h.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.ledger.Append(context.Background(), rv, actorRunner, st); err != nil {
		t.Fatal(err)
	}
	// The attempt is still within its timeout: the runner waits it out
	// (plus the grace) before declaring it lost.
	if err := h.Review(context.Background(), "rev-w"); err != nil {
		t.Fatal(err)
	}
	want := []string{"Submitted", "AttemptStarted", "AttemptTimedOut:worker_lost", "AttemptStarted", "FindingReceived:accepted:response"}
	if got := h.types(t, "rev-w"); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	if s := h.clock.Sleeps(); len(s) == 0 || s[0] != 4*time.Second {
		t.Errorf("waits = %v, want the 2s timeout plus the 2s grace first", s)
	}
}

func TestSweeperEscalatesPastDeadline(t *testing.T) {
	t.Parallel()
	h := newHarness(t, []step{hang})
	h.submit(t, "rev-old", "short") // deadline +3s
	h.submit(t, "rev-new", "c")     // deadline +10s
	ctx := context.Background()
	h.clock.Advance(3*time.Second + 400*time.Millisecond) // inside the grace
	if n, err := h.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("Sweep in grace = %d, %v", n, err)
	}
	h.clock.Advance(200 * time.Millisecond)
	if n, err := h.Sweep(ctx); err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v; want 1", n, err)
	}
	rv := h.load(t, "rev-old")
	if rv.State() != domain.StateManualReview || rv.EscalationReason() != domain.ReasonDeadlinePassed {
		t.Fatalf("rev-old: %s %s", rv.State(), rv.EscalationReason())
	}
	if h.load(t, "rev-new").State() != domain.StatePending {
		t.Fatal("rev-new swept before its deadline")
	}
	if n, _ := h.Sweep(ctx); n != 0 {
		t.Fatalf("second sweep escalated %d", n)
	}
	// A submission staged but never created: a worker leaves its mark (the
	// submission may be in progress), the sweeper clears it past the
	// deadline.
	if err := h.state.stage(ctx, "ghost", "c", payload{Digest: "sha256:00"}, h.clock.Now().Add(time.Second), h.clock.Now()); err != nil {
		t.Fatal(err)
	}
	if err := h.Review(ctx, "ghost"); err != nil {
		t.Fatal(err)
	}
	if ids, _ := h.state.pending(ctx, farFuture, 10); !slices.Contains(ids, "ghost") {
		t.Fatalf("pending = %v: a worker cleared a submission in progress", ids)
	}
	h.clock.Advance(2 * time.Second)
	if _, err := h.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if ids, _ := h.state.pending(ctx, farFuture, 10); slices.Contains(ids, "ghost") {
		t.Fatalf("pending = %v: the sweeper left a stale mark", ids)
	}
	// A worker picking the swept review up finds nothing to do.
	if err := h.Review(ctx, "rev-old"); err != nil || len(h.prov.Requests()) != 0 {
		t.Fatalf("Review after sweep = %v, %d calls", err, len(h.prov.Requests()))
	}
}

// A review whose worker died mid-attempt is escalated by the sweeper with
// its open attempt closed as worker_lost first, in the same append: the
// attempt never stays without an outcome.
func TestSweeperClosesTheOpenAttempt(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	ctx := context.Background()
	for _, id := range []string{"rev-dead", "rev-dead-closed"} {
		rv := h.submit(t, id, "closed") // fail closed: deadline_passed rejects
		h.clock.Advance(time.Second)
		st, err := rv.StartAttempt(h.clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.ledger.Append(ctx, rv, actorRunner, st); err != nil {
			t.Fatal(err)
		}
	}
	// The worker of rev-dead-closed closes its attempt before the sweep.
	rv := h.load(t, "rev-dead-closed")
	n, _, _, _ := rv.InFlight()
	ev, err := rv.TimeOutAttempt(domain.AttemptFailure{Attempt: n, Classification: domain.ClassDeadlineExceeded}, h.clock.Now().Add(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.ledger.Append(ctx, rv, actorRunner, ev); err != nil {
		t.Fatal(err)
	}
	policy := testPolicy().Classes["closed"]
	h.clock.Advance(policy.Budget + time.Second)
	if n, err := h.Sweep(ctx); err != nil || n != 2 {
		t.Fatalf("Sweep = %d, %v; want 2", n, err)
	}

	want := []string{"Submitted", "AttemptStarted", "AttemptTimedOut:worker_lost", "Escalated:deadline_passed"}
	if got := h.types(t, "rev-dead"); !slices.Equal(got, want) {
		t.Fatalf("rev-dead: events %v, want %v", got, want)
	}
	hist, err := h.ledger.History(ctx, "rev-dead")
	if err != nil {
		t.Fatal(err)
	}
	closed, esc := hist.Events[2], hist.Events[3]
	if closed.Metadata.Actor != "sweeper" || esc.Metadata.Actor != "sweeper" {
		t.Errorf("actors %q, %q; want sweeper", closed.Metadata.Actor, esc.Metadata.Actor)
	}
	started := hist.Events[1].Event.(domain.AttemptStarted).StartedAt
	if to := closed.Event.(domain.AttemptTimedOut); to.Attempt != 1 || to.ElapsedMS != h.clock.Now().Sub(started).Milliseconds() {
		t.Errorf("closed attempt %+v, want attempt 1 after %s", to, h.clock.Now().Sub(started))
	}
	// One append: one transaction in the store's global order.
	recs, err := h.ledger.Store().ReadStream(ctx, domain.StreamName("rev-dead"), 2)
	if err != nil || len(recs) != 2 || recs[0].Position.Commit != recs[1].Position.Commit {
		t.Errorf("the timeout and the escalation were not one append: %+v, %v", recs, err)
	}
	if rv := h.load(t, "rev-dead"); rv.State() != domain.StateRejected {
		t.Errorf("rev-dead: %s, want rejected (fail closed)", rv.State())
	}
	if n := h.counter(t, h.metrics.attempts.WithLabelValues(string(domain.ClassWorkerLost))); n != 1 {
		t.Errorf("worker_lost attempts counted %v, want 1", n)
	}

	// An attempt its worker closed is left as it was.
	want = []string{"Submitted", "AttemptStarted", "AttemptTimedOut:deadline_exceeded", "Escalated:deadline_passed"}
	if got := h.types(t, "rev-dead-closed"); !slices.Equal(got, want) {
		t.Fatalf("rev-dead-closed: events %v, want %v", got, want)
	}
}

// The callback lands on another process: the waiting attempt is not told,
// times out, its AttemptTimedOut fails the expected-revision check, and the
// reload shows the decision. Nothing is appended twice.
func TestAsyncCallbackOnAnotherProcess(t *testing.T) {
	t.Parallel()
	var other *Service
	async := step{latency: 10 * time.Millisecond, advance: toTimeout, result: provider.Result{Outcome: provider.OutcomeAccepted}}
	h := newHarness(t, []step{async})
	async.then = func(req provider.Request) {
		hdr, body := h.signedCallback(req.ReviewID, req.Attempt, "accepted", "elsewhere-1")
		if err := other.HandleCallback(context.Background(), req.ReviewID, hdr, body); err != nil {
			t.Errorf("callback on the other process = %v", err)
		}
	}
	h.prov.steps[0] = async
	var err error
	other, err = New(Config{Policy: testPolicy(), Ledger: h.ledger, Pool: h.Pool(), Provider: h.prov, Signer: h.signer,
		Clock: h.clock, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.closePub() })
	rv := h.run(t, "rev-far", "c")
	if rv.State() != domain.StateAccepted {
		t.Fatalf("state = %s", rv.State())
	}
	want := []string{"Submitted", "AttemptStarted", "FindingReceived:accepted:callback"}
	if got := h.types(t, "rev-far"); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	if n := h.counter(t, h.metrics.conflicts.WithLabelValues(domain.SourceResponse)); n != 0 {
		t.Errorf("%v conflicts counted for the runner's own timeout", n)
	}
}

// Retrying an attempt lost with its worker is recovery: the retry budget
// does not refuse it, even when spent.
func TestRecoveryIsNotChargedToTheRetryBudget(t *testing.T) {
	t.Parallel()
	h := newHarness(t, []step{finding("rev-rec", domain.DecisionAccepted)}, func(c *Config) {
		c.RetryBudget, c.RetryBudgetMinRetries = 0.01, 1
	})
	h.budget.record(h.clock.Now(), true) // the budget is spent
	if h.budget.allow(h.clock.Now()) {
		t.Fatal("budget not spent")
	}
	rv := h.submit(t, "rev-rec", "c")
	st, _ := rv.StartAttempt(h.clock.Now())
	if _, err := h.ledger.Append(context.Background(), rv, actorRunner, st); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(10 * time.Second / 2)
	if err := h.Review(context.Background(), "rev-rec"); err != nil {
		t.Fatal(err)
	}
	want := []string{"Submitted", "AttemptStarted", "AttemptTimedOut:worker_lost", "AttemptStarted", "FindingReceived:accepted:response"}
	if got := h.types(t, "rev-rec"); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
}
