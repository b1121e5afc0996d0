package projections

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/reviewledger/reviewledger/eventstore"
)

func TestBatchCacheSharesFullBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newBatchCache(3, 2)
	var loads atomic.Int64
	load := func(full bool) func() batch {
		return func() batch {
			loads.Add(1)
			return batch{read: 5, full: full}
		}
	}
	at := func(n uint64) eventstore.Position { return eventstore.Position{Commit: n, Prepare: n} }

	for range 3 {
		c.get(ctx, at(1), load(true))
	}
	if loads.Load() != 1 {
		t.Fatalf("a full batch asked for by three consumers was loaded %d times, want 1", loads.Load())
	}
	if len(c.entries) != 0 {
		t.Fatalf("%d entries kept after every consumer took the batch", len(c.entries))
	}

	loads.Store(0)
	for range 3 {
		c.get(ctx, at(2), load(false))
	}
	if loads.Load() != 3 {
		t.Fatalf("a short batch was loaded %d times, want 3 (never shared)", loads.Load())
	}

	// A consumer far behind finds its batches evicted and loads them itself.
	loads.Store(0)
	for n := uint64(10); n < 14; n++ {
		c.get(ctx, at(n), load(true))
	}
	if len(c.entries) != 2 {
		t.Fatalf("%d entries, want the capacity of 2", len(c.entries))
	}
	c.get(ctx, at(10), load(true))
	c.get(ctx, at(13), load(true))
	if loads.Load() != 5 {
		t.Fatalf("%d loads, want 5 (four, then the evicted one again)", loads.Load())
	}
}
