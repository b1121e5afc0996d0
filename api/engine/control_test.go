package engine

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/api/engine/provider"
	"github.com/reviewledger/reviewledger/domain"
)

// Each row of the provider protocol's table, and each exit of the control
// path, on a deterministic clock with the engine's storage in memory.
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
		{name: "202 without a callback times out", class: "c", steps: []step{async, finding(id, domain.DecisionAccepted)},
			state: domain.StateAccepted, events: []string{"Submitted", "AttemptStarted", "AttemptTimedOut:deadline_exceeded", "AttemptStarted", "FindingReceived:accepted:response"}},
		{name: "202 after the attempt timeout is a timeout", class: "c", steps: []step{{latency: toTimeout, result: provider.Result{Outcome: provider.OutcomeAccepted}}, finding(id, domain.DecisionAccepted)},
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
			if _, ok := h.mem.Record(id); ok {
				t.Error("the work record outlived the automated path")
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

// A Retry-After within the budget is waited out, parked; the backoff
// (with the jitter the decider draws for the review) applies otherwise.
// Each wait is counted from when the attempt ended.
func TestWaitsAreParked(t *testing.T) {
	t.Parallel()
	h := newHarness(t, []step{failure(domain.ClassRateLimited, 3*time.Second), finding("rev-ra", domain.DecisionAccepted)})
	h.run(t, "rev-ra", "c")
	if !slices.Equal(h.waits, []time.Duration{3 * time.Second}) {
		t.Fatalf("waits = %v, want the 3s Retry-After", h.waits)
	}
	h2 := newHarness(t, []step{failure(domain.ClassProviderUnavailable, 0), failure(domain.ClassProviderUnavailable, 0), finding("rev-b", domain.DecisionAccepted)})
	h2.run(t, "rev-b", "c")
	b := testPolicy().Classes["c"].Backoff
	want := []time.Duration{b.Delay(1, domain.JitterSource("rev-b", 1)), b.Delay(2, domain.JitterSource("rev-b", 2))}
	if !slices.Equal(h2.waits, want) || want[0] < 100*time.Millisecond || want[1] < 200*time.Millisecond {
		t.Fatalf("waits = %v, want %v (100ms and 200ms plus jitter under 50ms)", h2.waits, want)
	}
	// While it waited, nothing of this process was held for it.
	if h2.InFlight() != 0 {
		t.Errorf("InFlight = %d", h2.InFlight())
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

// 202: the review is parked awaiting the callback, holding nothing; the
// callback decides it and releases its record.
func TestAsyncCallbackDecidesAParkedReview(t *testing.T) {
	t.Parallel()
	h := newHarness(t, []step{async})
	h.submit(t, "rev-async", "c")
	h.workOnce(t, "rev-async")
	started := h.events(t, "rev-async")[1].(domain.AttemptStarted)
	end := started.StartedAt.Add(time.Duration(started.AttemptTimeoutMS) * time.Millisecond)
	if rec, ok := h.mem.Record("rev-async"); !ok || rec.Owner != "" || rec.Awaiting != 1 || !rec.DueAt.Equal(end) {
		t.Fatalf("record after the 202: %+v, %v; want parked awaiting attempt 1 until %s", rec, ok, end)
	}
	if h.InFlight() != 0 {
		t.Fatalf("InFlight = %d while parked", h.InFlight())
	}
	hdr, body := h.signedCallback("rev-async", 1, "rejected", "msg-1")
	if err := h.HandleCallback(context.Background(), "rev-async", hdr, body); err != nil {
		t.Fatalf("HandleCallback = %v", err)
	}
	want := []string{"Submitted", "AttemptStarted", "FindingReceived:rejected:callback"}
	if got := h.types(t, "rev-async"); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	if _, ok := h.mem.Record("rev-async"); ok {
		t.Error("the callback left the work record")
	}
	h.mu.Lock()
	known := len(h.jobs)
	h.mu.Unlock()
	if known != 0 {
		t.Errorf("%d jobs still known after the callback decided the parked review", known)
	}
	// The same webhook delivered again changes nothing and is answered as
	// applied.
	if err := h.HandleCallback(context.Background(), "rev-async", hdr, body); err != nil {
		t.Fatalf("redelivery = %v, want nil", err)
	}
	if n := len(h.events(t, "rev-async")); n != 3 {
		t.Fatalf("%d events after redelivery", n)
	}
}

// The callback lands on another process sharing the store: the parked
// review's record goes with the finding; this process's wake-up finds
// nothing to claim and forgets the review. Nothing is appended twice.
func TestAsyncCallbackOnAnotherProcess(t *testing.T) {
	t.Parallel()
	h := newHarness(t, []step{async})
	other, err := New(inProcess(Config{Policy: testPolicy(), Store: h.store, Ledger: h.ledger, Provider: h.prov, Signer: h.signer,
		Clock: h.clock, Logger: slog.New(slog.DiscardHandler), Owner: "other"}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.closePub() })
	h.submit(t, "rev-far", "c")
	h.workOnce(t, "rev-far")
	hdr, body := h.signedCallback("rev-far", 1, "accepted", "elsewhere-1")
	if err := other.HandleCallback(context.Background(), "rev-far", hdr, body); err != nil {
		t.Fatalf("callback on the other process = %v", err)
	}
	h.clock.Advance(3 * time.Second)
	if h.workOnce(t, "rev-far") {
		t.Fatal("the decided review was taken again")
	}
	h.dropUnclaimed([]string{"rev-far"}, nil, h.clock.Now())
	h.mu.Lock()
	known := len(h.jobs)
	h.mu.Unlock()
	if known != 0 {
		t.Errorf("%d jobs still known", known)
	}
	want := []string{"Submitted", "AttemptStarted", "FindingReceived:accepted:callback"}
	if got := h.types(t, "rev-far"); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	if n := h.counter(t, h.metrics.conflicts.WithLabelValues(domain.SourceResponse)); n != 0 {
		t.Errorf("%v conflicts counted", n)
	}
}

// A callback after its attempt timed out, or for an attempt not in flight,
// or after the review was decided, is a conflicting completion.
func TestCallbackConflicts(t *testing.T) {
	t.Parallel()
	h := newHarness(t, []step{async, hang, hang})
	h.submit(t, "rev-cb", "c")
	ctx := context.Background()
	// Attempt 1 is accepted for asynchronous review and times out without a
	// callback; its callback comes late, while attempt 2 hangs.
	h.prov.steps[1].then = func(provider.Request) {
		hdr, body := h.signedCallback("rev-cb", 1, "accepted", "late-1")
		if err := h.HandleCallback(ctx, "rev-cb", hdr, body); !errors.Is(err, ErrConflictingCompletion) {
			t.Errorf("late callback = %v, want ErrConflictingCompletion", err)
		}
	}
	rv := h.drive(t, "rev-cb")
	if rv.State() != domain.StateManualReview || rv.EscalationReason() != domain.ReasonAttemptsExhausted {
		t.Fatalf("state %s reason %s, want manual_review attempts_exhausted", rv.State(), rv.EscalationReason())
	}
	want := []string{"Submitted", "AttemptStarted", "AttemptTimedOut:deadline_exceeded", "AttemptStarted", "AttemptTimedOut:deadline_exceeded",
		"AttemptStarted", "AttemptTimedOut:deadline_exceeded", "Escalated:attempts_exhausted"}
	if got := h.types(t, "rev-cb"); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	// After the escalation, a callback for the last attempt conflicts too.
	hdr, body := h.signedCallback("rev-cb", 3, "accepted", "late-3")
	if err := h.HandleCallback(ctx, "rev-cb", hdr, body); !errors.Is(err, ErrConflictingCompletion) {
		t.Fatalf("callback after escalation = %v", err)
	}
	// Redelivery of a refused webhook is refused again, and counted.
	if err := h.HandleCallback(ctx, "rev-cb", hdr, body); !errors.Is(err, ErrConflictingCompletion) {
		t.Fatalf("redelivered conflicting callback = %v", err)
	}
	if n := h.counter(t, h.metrics.conflicts.WithLabelValues("callback")); n != 3 {
		t.Errorf("callback conflicts = %v, want 3", n)
	}
	if got := len(h.events(t, "rev-cb")); got != len(want) {
		t.Errorf("conflicts changed the history: %d events", got)
	}
	wantConflicts := []string{"callback:attempt_not_in_flight:1", "callback:review_moved_on:3", "callback:duplicate_delivery:3"}
	if got := h.conflicts(t, "rev-cb"); !slices.Equal(got, wantConflicts) {
		t.Errorf("recorded conflicts %v, want %v", got, wantConflicts)
	}
}
