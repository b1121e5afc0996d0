package runner

import (
	"context"
	"sync"
	"time"
)

// outstandingTTL is how long a count of pending reviews is reused before
// the table is counted again.
const outstandingTTL = 250 * time.Millisecond

// outstanding counts reviews still on the automated path, across every
// process sharing the database, for admission control. Counting
// runner_pending on every submit would put a scan on the hot path, so the
// count is cached briefly and the reviews this process created since are
// added on top.
type outstanding struct {
	mu      sync.Mutex
	counted time.Time
	count   int
	since   int // reviews created here since the count
}

// Outstanding returns the number of reviews submitted and not yet out of
// pending, in every process sharing the database: the work the workers
// still owe. The figure may be up to a quarter of a second old; when the
// database cannot be read it falls back to the last count.
func (s *Service) Outstanding() int {
	o := &s.outstanding
	o.mu.Lock()
	defer o.mu.Unlock()
	now := s.clock.Now()
	if now.Sub(o.counted) >= outstandingTTL || o.counted.IsZero() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		var n int
		err := s.cfg.Pool.QueryRow(ctx, `SELECT count(*) FROM runner_pending`).Scan(&n)
		cancel()
		if err == nil {
			o.count, o.since, o.counted = n, 0, now
		} else {
			s.log.Warn("count outstanding reviews", "err", err)
		}
	}
	return max(o.count+o.since, int(s.inFlight.Load()))
}

// created notes a review created by this process since the last count.
func (o *outstanding) created() {
	o.mu.Lock()
	o.since++
	o.mu.Unlock()
}
