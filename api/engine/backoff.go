package engine

import (
	"time"

	"github.com/reviewledger/reviewledger/eventstore/clock"
)

// backoff is the wait between retries of a failing store operation:
// clock.Backoff from 50ms doubling to 2s, without jitter.
type backoff struct{ failures int }

const (
	backoffMin = 50 * time.Millisecond
	backoffMax = 2 * time.Second
)

func newBackoff() *backoff { return &backoff{} }

// next returns the wait before the next try and doubles the one after.
func (b *backoff) next() time.Duration {
	b.failures++
	return clock.Backoff(backoffMin, backoffMax, b.failures, 0, 0)
}

func (b *backoff) reset() { b.failures = 0 }
