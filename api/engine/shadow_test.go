package engine

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/reviewledger/reviewledger/api/engine/provider"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
)

// withShadow adds shadow provider p, with concurrency n, to class "c",
// whose reviews the default provider accepts.
func withShadow(p provider.Provider, n int) func(*Config) {
	return func(c *Config) {
		c.Provider = &disagreeing{}
		withShadowOn("c", p, n)(c)
	}
}

// withShadowOn makes p, with concurrency n (0: Config.Calls), the shadow
// provider "shadow" of class, which the policy must have.
func withShadowOn(class string, p provider.Provider, n int) func(*Config) {
	return func(c *Config) {
		c.Providers = map[string]Upstream{"shadow": {Provider: p, Concurrency: n}}
		cp := c.Policy.Classes[class]
		cp.Shadows = []string{"shadow"}
		c.Policy.Classes[class] = cp
	}
}

// disagreeing rejects the reviews of reject and accepts the others.
type disagreeing struct {
	reject map[string]bool
	calls  atomic.Int64
}

func (p *disagreeing) Call(_ context.Context, req provider.Request) provider.Result {
	p.calls.Add(1)
	state := domain.DecisionAccepted
	if p.reject[req.ReviewID] {
		state = domain.DecisionRejected
	}
	return provider.Result{Outcome: provider.OutcomeFinding, Finding: domain.Finding{ReviewID: req.ReviewID, Attempt: req.Attempt, State: state, Reasons: []string{"shadow"}}}
}

// hanging answers only when its call is cancelled.
type hanging struct{ calls atomic.Int64 }

func (p *hanging) Call(ctx context.Context, _ provider.Request) provider.Result {
	p.calls.Add(1)
	<-ctx.Done()
	return provider.Failure(domain.ClassTransportError, "cancelled")
}

func TestAShadowObservesEveryReviewAndDecidesNone(t *testing.T) {
	t.Parallel()
	shadow := &disagreeing{reject: map[string]bool{"sh-3": true}}
	// A slot for every review: on a loaded machine the observations of
	// earlier reviews may still be being written when later ones are
	// decided, and a shadow call beyond the slots is skipped (the next
	// test's point, not this one's).
	h := newHarness(t, nil, withShadow(shadow, 10))
	for i := range 10 {
		id := fmt.Sprintf("sh-%d", i)
		rv := h.run(t, id, "c")
		if rv.State() != domain.StateAccepted || rv.DecidingProvider() != domain.DefaultProvider || rv.Version() != 2 {
			t.Fatalf("%s is %s at version %d decided by %q, want accepted at 2 by the default provider: %v",
				id, rv.State(), rv.Version(), rv.DecidingProvider(), h.types(t, id))
		}
	}
	h.shadowing.Wait()
	for i := range 10 {
		id := fmt.Sprintf("sh-%d", i)
		log, err := h.ledger.Shadows(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if len(log.Events) != 1 {
			t.Fatalf("%s has %d shadow observations, want 1", id, len(log.Events))
		}
		o := log.Events[0].Event.(domain.ShadowObserved)
		want := domain.DecisionAccepted
		if id == "sh-3" {
			want = domain.DecisionRejected
		}
		if o.Provider != "shadow" || o.Outcome != domain.ShadowFinding || o.State != want || o.ContentClass != "c" {
			t.Fatalf("%s observed %+v, want a %s finding of provider shadow", id, o, want)
		}
		if err := log.Verify(); err != nil {
			t.Fatalf("%s shadow stream: %v", id, err)
		}
	}
	if got := testutil.ToFloat64(h.metrics.shadowCalls.WithLabelValues("shadow", "finding")); got != 10 {
		t.Fatalf("shadow_calls_total{outcome=finding} = %v, want 10", got)
	}
}

// A shadow that never answers holds its own slots, not the review's: every
// review is decided while its calls hang, those beyond its concurrency are
// skipped, and the hanging ones are recorded as timeouts once their
// timeout passes.
func TestAHangingShadowNeverDelaysADecision(t *testing.T) {
	t.Parallel()
	shadow := &hanging{}
	h := newHarness(t, nil, withShadow(shadow, 2))
	for i := range 5 {
		id := fmt.Sprintf("hang-%d", i)
		if rv := h.run(t, id, "c"); rv.State() != domain.StateAccepted {
			t.Fatalf("%s is %s while its shadow hangs: %v", id, rv.State(), h.types(t, id))
		}
	}
	clocktest.Eventually(t, "two shadow calls hanging", func() bool { return shadow.calls.Load() == 2 })
	if got := testutil.ToFloat64(h.metrics.shadowCalls.WithLabelValues("shadow", "skipped")); got != 3 {
		t.Fatalf("shadow_calls_total{outcome=skipped} = %v, want 3 (concurrency 2, 5 reviews)", got)
	}
	h.clock.Advance(h.cfg.Policy.Classes["c"].AttemptTimeout)
	h.shadowing.Wait()
	timeouts := 0
	for i := range 5 {
		log, err := h.ledger.Shadows(context.Background(), fmt.Sprintf("hang-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range log.Events {
			if o := e.Event.(domain.ShadowObserved); o.Outcome == domain.ShadowTimeout {
				timeouts++
			}
		}
	}
	if timeouts != 2 {
		t.Fatalf("%d shadow timeouts recorded, want 2", timeouts)
	}
}
