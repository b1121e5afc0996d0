package engine

import "time"

// backoff is the wait between retries of a failing store operation:
// 50ms doubling to 2s.
type backoff struct{ d time.Duration }

const (
	backoffMin = 50 * time.Millisecond
	backoffMax = 2 * time.Second
)

func newBackoff() *backoff { return &backoff{d: backoffMin} }

// next returns the wait before the next try and doubles the one after.
func (b *backoff) next() time.Duration {
	d := b.d
	b.d = min(2*b.d, backoffMax)
	return d
}

func (b *backoff) reset() { b.d = backoffMin }
