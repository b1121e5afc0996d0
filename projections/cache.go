package projections

import (
	"context"
	"sync"

	"github.com/reviewledger/reviewledger/eventstore"
)

// batchCache shares read and decoded batches between the projections of one
// Runner, which read the same global order: while they keep pace, each batch
// is read and decoded once instead of once per projection.
//
// Only full batches are shared. A full batch after a position never changes
// (the global order is gap-safe), whereas a short one at the head of the
// ledger may grow on the next read. Batches are read-only once shared.
type batchCache struct {
	consumers int // projections that will ask for each batch
	capacity  int // batches kept at most

	mu      sync.Mutex
	entries map[eventstore.Position]*cacheEntry
	order   []eventstore.Position // oldest first
}

type cacheEntry struct {
	ready chan struct{} // closed when b is set, or the load failed
	b     batch
	ok    bool
	left  int // consumers yet to take it
}

func newBatchCache(consumers, capacity int) *batchCache {
	return &batchCache{consumers: consumers, capacity: capacity, entries: make(map[eventstore.Position]*cacheEntry)}
}

// get returns the batch after pos: a shared one when another projection
// already read it, else the one load reads (shared when full).
func (c *batchCache) get(ctx context.Context, pos eventstore.Position, load func() batch) batch {
	if c == nil || c.consumers < 2 {
		return load()
	}
	c.mu.Lock()
	e, found := c.entries[pos]
	if !found {
		e = &cacheEntry{ready: make(chan struct{}), left: c.consumers}
		c.entries[pos] = e
		c.order = append(c.order, pos)
		c.evictLocked()
	}
	c.mu.Unlock()

	if !found {
		b := load()
		c.mu.Lock()
		e.b, e.ok = b, b.err == nil && b.full
		if !e.ok {
			c.removeLocked(pos, e)
		} else {
			c.takeLocked(pos, e)
		}
		c.mu.Unlock()
		close(e.ready)
		return b
	}
	select {
	case <-e.ready:
	case <-ctx.Done():
		return batch{err: ctx.Err()}
	}
	if !e.ok {
		return load()
	}
	c.mu.Lock()
	c.takeLocked(pos, e)
	c.mu.Unlock()
	return e.b
}

// takeLocked counts one consumer served and forgets the entry after the last.
func (c *batchCache) takeLocked(pos eventstore.Position, e *cacheEntry) {
	if e.left--; e.left <= 0 {
		c.removeLocked(pos, e)
	}
}

func (c *batchCache) removeLocked(pos eventstore.Position, e *cacheEntry) {
	if c.entries[pos] != e {
		return
	}
	delete(c.entries, pos)
	for i, p := range c.order {
		if p == pos {
			c.order = append(c.order[:i], c.order[i+1:]...)
			break
		}
	}
}

// evictLocked drops the oldest batches beyond capacity: a projection far
// behind the others reads for itself.
func (c *batchCache) evictLocked() {
	for len(c.order) > c.capacity {
		pos := c.order[0]
		c.order = c.order[1:]
		if e := c.entries[pos]; e != nil {
			select {
			case <-e.ready:
				delete(c.entries, pos)
			default:
				// Still loading: keep it reachable for its waiters.
				c.order = append(c.order, pos)
				return
			}
		}
	}
}
