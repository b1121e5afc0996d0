package clocktest

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// TestEventuallyReturnsOnceItHolds: the condition is polled until it
// holds, and a condition that never holds fails the test naming what was
// waited for and how long.
func TestEventuallyReturnsOnceItHolds(t *testing.T) {
	var polls atomic.Int32
	Eventually(t, "the third poll", func() bool { return polls.Add(1) >= 3 })
	if n := polls.Load(); n != 3 {
		t.Fatalf("%d polls, want 3", n)
	}
	failed := failure(t, func(tb testing.TB) {
		Within(tb, 20*time.Millisecond, "nothing", func() bool { return false })
	})
	if failed != "waited 20ms for nothing" {
		t.Fatalf("failure %q", failed)
	}
}

// TestEventuallyShowsWhatItSaw: a condition that says what it saw is
// polled as Eventually polls, and its failure ends with the last account.
func TestEventuallyShowsWhatItSaw(t *testing.T) {
	var polls atomic.Int32
	EventuallyShows(t, "the third poll", func() (bool, string) {
		n := polls.Add(1)
		return n >= 3, fmt.Sprintf("poll %d", n)
	})
	if n := polls.Load(); n != 3 {
		t.Fatalf("%d polls, want 3", n)
	}
	n := 0
	failed := failure(t, func(tb testing.TB) {
		WithinShows(tb, 20*time.Millisecond, "nothing", func() (bool, string) {
			n++
			return false, fmt.Sprintf("poll %d", n)
		})
	})
	if failed != fmt.Sprintf("waited 20ms for nothing; last seen: poll %d", n) || n < 2 {
		t.Fatalf("failure %q after %d polls, want the last poll's account", failed, n)
	}
}

// failure runs wait on a recorder, on a goroutine of its own as a failure
// ends it, and returns the failure it recorded.
func failure(t *testing.T, wait func(tb testing.TB)) string {
	rec := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		wait(rec)
	}()
	<-done
	return rec.failed
}

// recorder records a Fatalf and ends the goroutine, as testing.T does.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
