package clock

import (
	"context"
	"time"
)

// Clock is the service's view of time where it waits as well as reads
// the time (the review engine): every wait watches its context, so a
// stopping process never sits out a timer, and tests inject a fake clock
// and drive time by hand. Code that only reads the time takes a
// func() time.Time (a Clock's Now fits it).
type Clock interface {
	Now() time.Time
	// Sleep waits d or until ctx is done, returning ctx's error then.
	Sleep(ctx context.Context, d time.Duration) error
	// AfterFunc calls f in its own goroutine once d has passed. stop
	// prevents the call if it has not happened yet.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// System is the wall clock.
type System struct{}

// Now returns time.Now().
func (System) Now() time.Time { return time.Now() }

// Sleep waits d or until ctx is done (the package's Sleep).
func (System) Sleep(ctx context.Context, d time.Duration) error { return Sleep(ctx, d) }

// AfterFunc is time.AfterFunc.
func (System) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}
