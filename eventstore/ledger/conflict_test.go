package ledger_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/memstore"
)

func TestRecordConflictKeepsTheReviewStream(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	l := ledger.New(store)
	rv, err := l.Create(ctx, submitted(t, "r1"), ledger.Actor{Name: "platform"})
	if err != nil {
		t.Fatal(err)
	}
	log, err := l.Conflicts(ctx, "r1")
	if err != nil || len(log.Events) != 0 {
		t.Fatalf("conflicts before any: %v, %v", log, err)
	}
	// Concurrent conflicts of one review all land, chained.
	const n = 8
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e, err := rv.RecordConflict(domain.Conflict{Attempt: i + 1, Source: domain.SourceCallback, Reason: domain.ConflictReviewMovedOn}, t0.Add(time.Second))
			if err == nil {
				err = l.RecordConflict(ctx, e, ledger.Actor{Name: "provider"})
			}
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	log, err = l.Conflicts(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if len(log.Events) != n {
		t.Fatalf("%d conflicts, want %d", len(log.Events), n)
	}
	if err := log.Verify(); err != nil {
		t.Fatal(err)
	}
	again, err := l.Load(ctx, "r1")
	if err != nil || again.Version() != rv.Version() {
		t.Fatalf("review at %d after conflicts (%v), want %d", again.Version(), err, rv.Version())
	}
	if recs, err := store.ReadStream(ctx, domain.StreamName("r1"), 0); err != nil || len(recs) != 1 {
		t.Fatalf("review stream has %d events (%v), want 1", len(recs), err)
	}

	// An altered conflict breaks the conflict stream's chain.
	log.Events[3].Data = []byte(`{"review_id":"r1"}`)
	var chain *ledger.ChainError
	if err := log.Verify(); !errors.As(err, &chain) || chain.Revision != 3 || !errors.Is(err, ledger.ErrTampered) {
		t.Fatalf("altered conflict: %v, want a chain break at 3", err)
	}
}
