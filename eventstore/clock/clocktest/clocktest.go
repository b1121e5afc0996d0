// Package clocktest is how a test waits for what another goroutine or
// process does: it polls a condition with a generous deadline, never
// sleeps a fixed time and hopes. One deadline for every test, long enough
// that only a failing test waits it out, on however loaded a machine.
package clocktest

import (
	"testing"
	"time"
)

// Wait is how long Eventually polls before it fails the test.
const Wait = 60 * time.Second

// Eventually polls cond until it holds, failing tb, naming what, when it
// has not held within Wait.
func Eventually(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	Within(tb, Wait, what, cond)
}

// Within polls cond until it holds, failing tb, naming what, after limit:
// for a test whose point is that something happens sooner than something
// else would (a lease of a minute, say), or one that waits for more than
// a minute's work. Polls start a millisecond apart and slow to every
// 50 ms.
func Within(tb testing.TB, limit time.Duration, what string, cond func() bool) {
	tb.Helper()
	WithinShows(tb, limit, what, func() (bool, string) { return cond(), "" })
}

// EventuallyShows is Eventually for a condition that also says what it
// saw: when it has not held within Wait, the failure names what was
// waited for and ends with cond's last account of what it saw instead.
func EventuallyShows(tb testing.TB, what string, cond func() (ok bool, seen string)) {
	tb.Helper()
	WithinShows(tb, Wait, what, cond)
}

// WithinShows is Within for a condition that also says what it saw, as
// EventuallyShows.
func WithinShows(tb testing.TB, limit time.Duration, what string, cond func() (ok bool, seen string)) {
	tb.Helper()
	deadline := time.Now().Add(limit)
	for pause := time.Millisecond; ; pause = min(2*pause, 50*time.Millisecond) {
		ok, seen := cond()
		switch {
		case ok:
			return
		case !time.Now().After(deadline):
			time.Sleep(pause)
		case seen == "":
			tb.Fatalf("waited %s for %s", limit, what)
		default:
			tb.Fatalf("waited %s for %s; last seen: %s", limit, what, seen)
		}
	}
}
