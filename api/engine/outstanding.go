package engine

import (
	"context"
	"sync"
	"time"
)

// outstandingTTL is how long a count of work records is reused before the
// table is counted again.
const outstandingTTL = 250 * time.Millisecond

// outstanding counts reviews still on the automated path, across every
// process sharing the store, for admission control. Counting the records
// on every submit would put a scan on the hot path, so the count is cached
// briefly and the reviews this process created since are added on top.
type outstanding struct {
	mu       sync.Mutex
	counted  time.Time
	count    int
	since    int  // reviews created here since the count
	counting bool // a count is under way; others use the cached figure
}

// Outstanding returns the number of reviews submitted and not yet out of
// pending, in every process sharing the store: the work still owed. The
// figure may be up to a quarter of a second old; when the store cannot be
// read it falls back to the last count. One caller at a time counts,
// outside the lock; the others answer from the cached figure meanwhile, so
// a slow count never queues submissions behind it.
func (e *Engine) Outstanding() int {
	o := &e.outstanding
	now := e.clock.Now()
	o.mu.Lock()
	stale := o.counted.IsZero() || now.Sub(o.counted) >= outstandingTTL
	if !stale || o.counting {
		n := o.count + o.since
		o.mu.Unlock()
		return max(n, e.InFlight())
	}
	o.counting = true
	sinceBefore := o.since
	o.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	n, err := e.store.Count(ctx)
	cancel()

	o.mu.Lock()
	o.counting = false
	if err == nil {
		// Reviews created while the count ran may or may not be in it;
		// keep them on top, erring towards refusing work.
		o.count, o.since, o.counted = n, o.since-sinceBefore, now
	} else {
		e.log.Warn("count outstanding reviews", "error", err.Error())
	}
	total := o.count + o.since
	o.mu.Unlock()
	return max(total, e.InFlight())
}

// created notes a review created by this process since the last count.
func (o *outstanding) created() {
	o.mu.Lock()
	o.since++
	o.mu.Unlock()
}
