package engine

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/reviewledger/reviewledger/api/engine/provider"
	"github.com/reviewledger/reviewledger/api/engine/work/memwork"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/memstore"
)

// slowAccept accepts after d, or fails when its context ends first.
type slowAccept struct{ d time.Duration }

func (p slowAccept) Call(ctx context.Context, req provider.Request) provider.Result {
	select {
	case <-time.After(p.d):
	case <-ctx.Done():
		return provider.Failure(domain.ClassTransportError, "cancelled")
	}
	return provider.Result{Outcome: provider.OutcomeFinding, Finding: domain.Finding{ReviewID: req.ReviewID, Attempt: req.Attempt, State: domain.DecisionAccepted}}
}

// An attempt starts when its call slot is free, not when its step began
// waiting for one: the wait is not charged to the attempt's timeout. One
// slot, two reviews, each call taking most of the timeout: the second
// waits for the first's and still has its whole timeout. The margins are
// wide (a call of 1 s against 1.6 s; charged with its wait, the second's
// would run 2 s), so that a loaded machine does not time the call out.
func TestAnAttemptIsNotChargedItsWaitForASlot(t *testing.T) {
	ctx := context.Background()
	events := memstore.New()
	store := memwork.New(events)
	led := ledger.New(events, ledger.Options{Committer: store})
	policy := domain.Policy{Classes: map[string]domain.ClassPolicy{"c": {
		Budget: 30 * time.Second, AttemptTimeout: 1600 * time.Millisecond, MaxAttempts: 3,
		Backoff:      domain.Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond},
		OnExhaustion: domain.ExhaustToManualReview, Priority: 1,
	}}}
	e := workingEngine(t, Config{Policy: policy, Store: store, Ledger: led, Provider: slowAccept{time.Second},
		Lease: time.Minute, PollInterval: 20 * time.Millisecond, Calls: 1})
	ids := []string{"slot-1", "slot-2"}
	for _, id := range ids {
		if _, _, err := e.Submit(ctx, SubmitRequest{ReviewID: id, ContentClass: "c", Content: []byte(id)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		waitAccepted(t, led, id, 10*time.Second)
		for _, typ := range eventTypes(t, led, id) {
			if strings.HasPrefix(typ, domain.TypeAttemptTimedOut) {
				t.Errorf("%s: an attempt timed out: %v", id, eventTypes(t, led, id))
			}
		}
	}
}

// A wait for a call slot that outlasts the review's budget ends the
// review as the budget's end would, not as a fault of the store retried.
func TestASlotWaitPastTheBudgetEscalates(t *testing.T) {
	ctx := context.Background()
	events := memstore.New()
	store := memwork.New(events)
	led := ledger.New(events, ledger.Options{Committer: store})
	class := func(budget time.Duration) domain.ClassPolicy {
		return domain.ClassPolicy{Budget: budget, AttemptTimeout: min(budget, time.Second), MaxAttempts: 3,
			Backoff:      domain.Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond},
			OnExhaustion: domain.ExhaustToManualReview, Priority: 1}
	}
	policy := domain.Policy{Classes: map[string]domain.ClassPolicy{"long": class(30 * time.Second), "short": class(200 * time.Millisecond)}}
	e := workingEngine(t, Config{Policy: policy, Store: store, Ledger: led, Provider: slowAccept{400 * time.Millisecond},
		Lease: time.Minute, PollInterval: 20 * time.Millisecond, Calls: 1})
	if _, _, err := e.Submit(ctx, SubmitRequest{ReviewID: "slot-long", ContentClass: "long", Content: []byte("l")}); err != nil {
		t.Fatal(err)
	}
	clocktest.Eventually(t, "the long call holding the slot", func() bool { return len(e.calls) == 1 }) // the long one holds the slot
	if _, _, err := e.Submit(ctx, SubmitRequest{ReviewID: "slot-short", ContentClass: "short", Content: []byte("s")}); err != nil {
		t.Fatal(err)
	}
	clocktest.Eventually(t, "slot-short in manual_review", func() bool {
		rv, err := led.Load(ctx, "slot-short")
		return err == nil && rv.State() == domain.StateManualReview
	})
	if got := eventTypes(t, led, "slot-short"); len(got) != 2 || got[1] != domain.TypeEscalated+":"+string(domain.ReasonBudgetExhausted) {
		t.Fatalf("events %v, want Submitted and an escalation for the budget, no attempt", got)
	}
	if n := testutil.ToFloat64(e.metrics.storeErrors); n != 0 {
		t.Fatalf("%v store errors counted, want none", n)
	}
}

// workingEngine is a running engine of cfg (its logger the tests'), once
// it works reviews.
func workingEngine(t *testing.T, cfg Config) *Engine {
	t.Helper()
	cfg.Logger = testLogger()
	e, err := New(inProcess(cfg))
	if err != nil {
		t.Fatal(err)
	}
	running(t, e)
	clocktest.Eventually(t, "the engine working", e.works.Load)
	return e
}
