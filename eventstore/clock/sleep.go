// Package clock holds the one wait every long-running loop of the service
// uses: a timer that also watches its context, so that a stopping process
// never sits out a delay (no time.Sleep on a production path); and the
// one backoff between tries of what fails and is tried again (Backoff).
package clock

import (
	"context"
	"time"
)

// Sleep waits d, or until ctx is done, whichever comes first. It returns
// ctx's error when ctx ended first (at once when ctx is already done) and
// nil when d passed; a d of zero or less only checks ctx.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
