package engine

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/reviewledger/reviewledger/api/engine/provider"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// Many reviews against a misbehaving simulated provider (hangs, errors,
// incomplete answers, callbacks on time and late), with the sweeper racing
// the engine: every history must keep the rules of the model: at most one
// decision, attempts within max_attempts and the deadline, findings only
// within their attempt.
func TestInvariantsUnderAFaultyProvider(t *testing.T) {
	t.Parallel()
	signer, _ := provider.NewSigner(testSecret)
	var svc *Engine
	sim, err := provider.NewSim(provider.SimConfig{
		Seed: 2026, MedianLatency: 20 * time.Millisecond, P99Latency: 250 * time.Millisecond,
		TimeoutRate: 0.1, ErrorRate: 0.1, InvalidRate: 0.05, AsyncRate: 0.3, LateCallbackRate: 0.3, RejectRate: 0.3,
		Signer: signer,
		Deliver: func(ctx context.Context, id string, h http.Header, body []byte) error {
			return svc.HandleCallback(ctx, id, h, body)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	policy := domain.Policy{Classes: map[string]domain.ClassPolicy{
		"open": {Budget: 1200 * time.Millisecond, AttemptTimeout: 200 * time.Millisecond, MaxAttempts: 3,
			Backoff:      domain.Backoff{Initial: 20 * time.Millisecond, Max: 100 * time.Millisecond, Jitter: 20 * time.Millisecond},
			OnExhaustion: domain.ExhaustToManualReview, Priority: 1},
		"gated": {Budget: 400 * time.Millisecond, AttemptTimeout: 200 * time.Millisecond, MaxAttempts: 3,
			Backoff:      domain.Backoff{Initial: 20 * time.Millisecond, Max: 100 * time.Millisecond, Jitter: 20 * time.Millisecond},
			OnExhaustion: domain.ExhaustToRejected, HumanGate: true, Priority: 2},
	}}
	svc, led, closeSvc, err := pgEngine(context.Background(), dbtest.URL(t), sim, func(c *Config) {
		c.Policy, c.Signer, c.Calls, c.RetryBudget = policy, signer, 8, 1
		c.SweepInterval, c.SweepGrace, c.PollInterval = 50*time.Millisecond, time.Millisecond, 20*time.Millisecond
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeSvc)
	ctx := context.Background()
	stop := running(t, svc)
	const n = 60
	for i := range n {
		class := "open"
		if i%3 == 0 {
			class = "gated"
		}
		if _, _, err := svc.Submit(ctx, SubmitRequest{ReviewID: fmt.Sprintf("chaos-%02d", i), ContentClass: class, Content: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	waitNoWork(t, svc, nil)
	stop()
	_ = sim.Close()

	states := map[domain.State]int{}
	for i := range n {
		id := fmt.Sprintf("chaos-%02d", i)
		hist, err := led.History(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		rv, err := hist.Snapshot()
		if err != nil {
			t.Fatalf("%s: history does not rebuild: %v", id, err)
		}
		states[rv.State()]++
		checkHistory(t, id, rv, hist)
	}
	conflicts := testutil.ToFloat64(svc.metrics.conflicts.WithLabelValues(domain.SourceCallback))
	t.Logf("final states: %v; conflicting callbacks: %v", states, conflicts)
	if conflicts == 0 {
		t.Error("no late callback was refused: the scenario did not exercise conditional completion")
	}
}

func checkHistory(t *testing.T, id string, rv *ledger.Snapshot, hist *ledger.History) {
	t.Helper()
	if rv.State() == domain.StatePending {
		t.Errorf("%s: still pending", id)
	}
	var (
		findings, escalations int
		open                  *domain.AttemptStarted
	)
	for _, e := range hist.Events {
		switch ev := e.Event.(type) {
		case domain.AttemptStarted:
			if ev.StartedAt.After(rv.Deadline()) {
				t.Errorf("%s: attempt %d started after the deadline", id, ev.Attempt)
			}
			if ev.Attempt > rv.Policy().MaxAttempts {
				t.Errorf("%s: attempt %d above max_attempts", id, ev.Attempt)
			}
			open = &ev
		case domain.FindingReceived:
			findings++
			if open == nil || open.Attempt != ev.Attempt {
				t.Errorf("%s: finding for attempt %d with no such attempt open", id, ev.Attempt)
			} else if limit := open.StartedAt.Add(time.Duration(open.AttemptTimeoutMS) * time.Millisecond); ev.ReceivedAt.After(limit) {
				t.Errorf("%s: finding committed %s after its attempt's timeout", id, ev.ReceivedAt.Sub(limit))
			}
			open = nil
		case domain.AttemptTimedOut:
			open = nil
		case domain.Escalated:
			escalations++
		}
	}
	switch {
	case findings > 1:
		t.Errorf("%s: %d findings committed", id, findings)
	case escalations > 1:
		t.Errorf("%s: escalated %d times", id, escalations)
	case findings == 1 && escalations == 1 && rv.EscalationReason() != domain.ReasonHumanGate:
		t.Errorf("%s: decided and escalated (%s)", id, rv.EscalationReason())
	case findings+escalations == 0:
		t.Errorf("%s: neither decided nor escalated", id)
	}
}
