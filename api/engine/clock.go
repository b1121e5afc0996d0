package engine

import (
	"context"
	"time"

	"github.com/reviewledger/reviewledger/eventstore/clock"
)

// Clock is the engine's view of time. Every wait watches its context, so a
// stopping engine never sits out a timer; tests inject a fake clock and
// drive time by hand.
type Clock interface {
	Now() time.Time
	// Sleep waits d or until ctx is done, returning ctx's error then.
	Sleep(ctx context.Context, d time.Duration) error
	// AfterFunc calls f in its own goroutine once d has passed. stop
	// prevents the call if it has not happened yet.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// Sleep waits d or until ctx is done (clock.Sleep).
func (SystemClock) Sleep(ctx context.Context, d time.Duration) error { return clock.Sleep(ctx, d) }

// AfterFunc is time.AfterFunc.
func (SystemClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}
