package audit_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/reviewledger/reviewledger/api/audit"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/pgstore"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// asks records how many reviews each call asked a witness for (-1 for
// every one) and how many times the reviews it knows were listed.
type asks struct {
	mu     sync.Mutex
	marks  []int
	listed int
}

func (a *asks) ask(ids []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if ids == nil {
		a.marks = append(a.marks, -1)
		return
	}
	a.marks = append(a.marks, len(ids))
}

// countedAnchors is PGAnchors, counting what it is asked.
type countedAnchors struct {
	audit.PGAnchors
	asks *asks
}

func (a countedAnchors) Marks(ctx context.Context, ids []string) (map[string]audit.Mark, error) {
	a.asks.ask(ids)
	return a.PGAnchors.Marks(ctx, ids)
}

func (a countedAnchors) ReviewIDs(ctx context.Context, each func(id string) error) error {
	a.asks.mu.Lock()
	a.asks.listed++
	a.asks.mu.Unlock()
	return a.PGAnchors.ReviewIDs(ctx, each)
}

// countedWitness is a witness that cannot list its reviews without their
// marks (no ReviewIDs), counting what it is asked.
type countedWitness struct {
	audit.Witness
	asks *asks
}

func (w countedWitness) Marks(ctx context.Context, ids []string) (map[string]audit.Mark, error) {
	w.asks.ask(ids)
	return w.Witness.Marks(ctx, ids)
}

// pagedStore is a pgstore that records the size of each page of streams
// asked for.
type pagedStore struct {
	*pgstore.Store
	mu    sync.Mutex
	pages []string // prefix, then limit
}

func (s *pagedStore) Streams(ctx context.Context, prefix, after string, limit int) ([]string, error) {
	s.mu.Lock()
	s.pages = append(s.pages, fmt.Sprintf("%s%d", prefix, limit))
	s.mu.Unlock()
	return s.Store.Streams(ctx, prefix, after, limit)
}

// TestVerifyHoldsAChunkAtATime: a whole-ledger verification lists the
// streams a chunk at a time and asks each witness for one chunk's marks at
// a time; reviews removed from the ledger entirely are still found, by
// listing what a witness knows (or, from a witness that cannot list, every
// mark it holds, once).
func TestVerifyHoldsAChunkAtATime(t *testing.T) {
	ctx := context.Background()
	pool := dbtest.Pool(t)
	store := &pagedStore{Store: pgstore.New(pool, pgstore.Config{})}
	t.Cleanup(store.Close)
	l := ledger.New(store.Store)
	for i := range 10 {
		sample(t, l, fmt.Sprintf("h-%02d", i))
	}
	first := &audit.Verifier{Store: store, Histories: l, Anchors: audit.PGAnchors{Pool: pool}, ChunkSize: 3}
	if rep, err := first.Verify(ctx, ""); err != nil || rep.Err() != nil || rep.Anchored != 10 {
		t.Fatalf("intact ledger: %+v, %v", rep, err)
	}
	if _, err := pool.Exec(ctx, `DELETE FROM event WHERE stream = 'review-h-05'`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO review_summary (review_id, content_class, state, attempts, version, submitted_at, deadline, human_gate, updated_at)
		VALUES ('h-gone', 'caption_suggestion', 'rejected', 3, 4, $1, $1, false, $1)`, t0); err != nil {
		t.Fatal(err)
	}
	store.pages = nil
	anchorAsks, summaryAsks := &asks{}, &asks{}
	v := &audit.Verifier{Store: store, Histories: l, ChunkSize: 3,
		Anchors:   countedAnchors{PGAnchors: audit.PGAnchors{Pool: pool}, asks: anchorAsks},
		Witnesses: []audit.Witness{countedWitness{Witness: audit.PGSummaries{Pool: pool}, asks: summaryAsks}}}
	rep, err := v.Verify(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := audit.DamagedIDs(rep.Damaged); !slices.Equal(got, []string{"h-05", "h-gone"}) || rep.Reviews != 11 {
		t.Fatalf("damaged %v of %d reviews, want h-05 and h-gone of 11: %v", got, rep.Reviews, rep.Err())
	}
	// Nine reviews listed in pages of 3 (the fourth page is empty), then
	// the side streams.
	if want := []string{"review-3", "review-3", "review-3", "review-3", "conflicts-3", "shadows-3"}; !slices.Equal(store.pages, want) {
		t.Errorf("pages of streams asked for: %v, want %v", store.pages, want)
	}
	// Three chunks listed, then one of the two unlisted reviews.
	if !slices.Equal(anchorAsks.marks, []int{3, 3, 3, 2}) || anchorAsks.listed != 1 {
		t.Errorf("anchors asked for the marks of %v reviews (-1: all) and listed %d times; want 3, 3, 3, 2 and once",
			anchorAsks.marks, anchorAsks.listed)
	}
	if slices.Sort(summaryAsks.marks); !slices.Equal(summaryAsks.marks, []int{-1, 2, 3, 3, 3}) {
		t.Errorf("review_summary asked for the marks of %v reviews (-1: all); want one chunk at a time, and all once to list them", summaryAsks.marks)
	}
}
