package runner

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/pgstore"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// A resume whose first read of the pending set fails (the database briefly
// unusable at start) retries until it succeeds: reviews left pending by a
// dead process are worked, not left for the sweeper to escalate untried.
func TestResumeRetriesAFailedRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	store := pgstore.New(pool, pgstore.Config{})
	t.Cleanup(store.Close)
	led := ledger.New(store)
	policy := domain.Policy{Classes: map[string]domain.ClassPolicy{"c": {
		Budget: time.Minute, AttemptTimeout: 20 * time.Second, MaxAttempts: 3,
		Backoff:      domain.Backoff{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond},
		OnExhaustion: domain.ExhaustToManualReview, Priority: 1,
	}}}
	// A review left pending by a process that died right after submitting.
	first, err := New(Config{Policy: policy, Ledger: led, Pool: pool, Provider: &instant{}, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := first.Submit(ctx, SubmitRequest{ReviewID: "left-1", ContentClass: "c", Content: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ALTER TABLE runner_pending RENAME TO runner_pending_away`); err != nil {
		t.Fatal(err)
	}
	svc, err := New(Config{Policy: policy, Ledger: led, Pool: pool, Provider: &instant{}, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(runCtx) }()
	// The first resume read fails; put the table back.
	time.Sleep(200 * time.Millisecond)
	if _, err := pool.Exec(ctx, `ALTER TABLE runner_pending_away RENAME TO runner_pending`); err != nil {
		t.Fatal(err)
	}
	waitNoPending(t, svc, done)
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	h := &harness{ledger: led}
	if got, want := h.types(t, "left-1"), []string{"Submitted", "AttemptStarted", "FindingReceived:accepted:response"}; !slices.Equal(got, want) {
		t.Fatalf("left-1: %v, want %v", got, want)
	}
}
