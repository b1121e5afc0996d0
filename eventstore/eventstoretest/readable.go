package eventstoretest

import (
	"context"
	"fmt"
	"testing"

	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
)

// WaitReadable waits until the global order of s holds n events, for a
// test of something that reads it (an audit, a rebuild): pgstore holds
// back events while an older transaction anywhere on the server runs, so
// the events a test appended are in ReadAll only once those have ended.
func WaitReadable(tb testing.TB, s eventstore.Store, n int) {
	tb.Helper()
	clocktest.EventuallyShows(tb, fmt.Sprintf("%d events readable", n), func() (bool, string) {
		evs, err := s.ReadAll(context.Background(), eventstore.Start, n+1)
		if err != nil {
			tb.Fatal(err)
		}
		return len(evs) == n, fmt.Sprintf("%d of %d events readable", len(evs), n)
	})
}
