package runner

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/api/provider"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/pgstore"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// instant answers every attempt with an accepting finding.
type instant struct{ calls atomic.Int64 }

func (p *instant) Review(_ context.Context, req provider.Request) provider.Result {
	p.calls.Add(1)
	return provider.Result{Outcome: provider.OutcomeFinding, Finding: domain.Finding{ReviewID: req.ReviewID, Attempt: req.Attempt, State: domain.DecisionAccepted}}
}

func TestDispatch(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{PubSubGoChannel, PubSubPostgres} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			testDispatch(t, backend)
		})
	}
}

func testDispatch(t *testing.T, backend string) {
	pool := dbtest.Pool(t)
	store := pgstore.New(pool, pgstore.Config{})
	t.Cleanup(store.Close)
	led := ledger.New(store)
	prov := &instant{}
	topic := fmt.Sprintf("reviewledger_test_%d", time.Now().UnixNano())
	newService := func() *Service {
		svc, err := New(Config{Policy: fastPolicy(), Ledger: led, Pool: pool, Provider: prov, Workers: 4,
			PubSub: backend, Topic: topic, Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		return svc
	}
	svc := newService()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	// Submitted before and while the workers run.
	const n = 20
	for i := range n {
		id := fmt.Sprintf("%s-%02d", backend, i)
		if _, _, err := svc.Submit(context.Background(), SubmitRequest{ReviewID: id, ContentClass: "fast", Content: []byte(id)}); err != nil {
			t.Fatal(err)
		}
	}
	waitNoPending(t, svc, done)
	// A message delivered again is harmless.
	for i := range 3 {
		if err := svc.publish(fmt.Sprintf("%s-%02d", backend, i)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond) // let any redelivered work run
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	for i := range n {
		id := fmt.Sprintf("%s-%02d", backend, i)
		rv, err := led.Load(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if rv.State() != domain.StateAccepted || rv.Attempts() != 1 {
			t.Errorf("%s: %s after %d attempts", id, rv.State(), rv.Attempts())
		}
	}
	if c := prov.calls.Load(); c != n {
		t.Errorf("%d provider calls for %d reviews", c, n)
	}
}

func waitNoPending(t *testing.T, svc *Service, done <-chan error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var left int
		if err := svc.Pool().QueryRow(context.Background(), `SELECT count(*) FROM runner_pending`).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d reviews still pending", left)
		}
		select {
		case err := <-done:
			t.Fatalf("Run returned early: %v", err)
		default:
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func testLogger(t *testing.T) *slog.Logger {
	if os.Getenv("RUNNER_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// Stopping Run leaves the reviews in progress pending, nothing escalated;
// the next Run resumes them.
func TestRunShutdownAndResume(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	store := pgstore.New(pool, pgstore.Config{})
	t.Cleanup(store.Close)
	led := ledger.New(store)
	policy := domain.Policy{Classes: map[string]domain.ClassPolicy{"long": {
		Budget: time.Minute, AttemptTimeout: 30 * time.Second, MaxAttempts: 3,
		Backoff:      domain.Backoff{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond},
		OnExhaustion: domain.ExhaustToManualReview, Priority: 1,
	}}}
	start := func(p provider.Provider) (*Service, context.CancelFunc, chan error) {
		svc, err := New(Config{Policy: policy, Ledger: led, Pool: pool, Provider: p, Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- svc.Run(ctx) }()
		return svc, cancel, done
	}
	svc, stop, done := start(stuck{})
	ids := []string{"sd-1", "sd-2", "sd-3"}
	for _, id := range ids {
		if _, _, err := svc.Submit(context.Background(), SubmitRequest{ReviewID: id, ContentClass: "long", Content: []byte(id)}); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, 20*time.Second, func() bool { return svc.InFlight() == len(ids) })
	if got := svc.Outstanding(); got != len(ids) {
		t.Errorf("Outstanding = %d with %d reviews stuck at the provider", got, len(ids))
	}
	waitUntil(t, 20*time.Second, func() bool {
		for _, id := range ids {
			rv, err := led.Load(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			if n, _, _, _ := rv.InFlight(); n == 0 {
				return false
			}
		}
		return true
	})
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	h := &harness{ledger: led}
	for _, id := range ids {
		want := []string{"Submitted", "AttemptStarted", "AttemptTimedOut:cancelled"}
		if got := h.types(t, id); !slices.Equal(got, want) {
			t.Errorf("%s after shutdown: %v, want %v", id, got, want)
		}
	}
	svc2, stop2, done2 := start(&instant{})
	if got := svc2.Outstanding(); got != len(ids) {
		t.Errorf("Outstanding after restart = %d, want the %d reviews left pending", got, len(ids))
	}
	waitNoPending(t, svc2, done2)
	waitUntil(t, 5*time.Second, func() bool { return svc2.Outstanding() == 0 })
	stop2()
	if err := <-done2; err != nil {
		t.Fatalf("second Run = %v", err)
	}
	for _, id := range ids {
		want := []string{"Submitted", "AttemptStarted", "AttemptTimedOut:cancelled", "AttemptStarted", "FindingReceived:accepted:response"}
		if got := h.types(t, id); !slices.Equal(got, want) {
			t.Errorf("%s after resume: %v, want %v", id, got, want)
		}
	}
}
