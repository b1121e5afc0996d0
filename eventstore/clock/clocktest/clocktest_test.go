package clocktest

import (
	"fmt"
	"runtime"
	"strings"
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
	rec := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Within(rec, 20*time.Millisecond, "nothing", func() bool { return false })
	}()
	<-done
	if rec.failed != "waited 20ms for nothing" {
		t.Fatalf("failure %q", rec.failed)
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
	rec := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		n := 0
		WithinShows(rec, 20*time.Millisecond, "nothing", func() (bool, string) {
			n++
			return false, fmt.Sprintf("poll %d", n)
		})
	}()
	<-done
	if !strings.HasPrefix(rec.failed, "waited 20ms for nothing; last seen: poll ") || strings.HasSuffix(rec.failed, "poll 1") {
		t.Fatalf("failure %q, want the last poll's account", rec.failed)
	}
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
