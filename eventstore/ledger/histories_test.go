package ledger_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/memstore"
)

// oneStreamAtATime is a store without ReadStreams.
type oneStreamAtATime struct{ eventstore.Store }

// TestHistoriesAreHistoryOfEach: Histories gives, in order, what History
// gives for each review (a missing one not found), whether the store
// reads many streams at once or not; an invalid ID is refused, and an
// error of the callback stops it.
func TestHistoriesAreHistoryOfEach(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	l := ledger.New(store)
	for _, id := range []string{"h1", "h2"} {
		rv, err := l.Create(ctx, submitted(t, id), ledger.Actor{Name: "platform"})
		if err != nil {
			t.Fatal(err)
		}
		start, err := rv.StartAttempt(t0.Add(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Append(ctx, rv, ledger.Actor{Name: "runner"}, start); err != nil {
			t.Fatal(err)
		}
	}
	ids := []string{"h2", "missing", "h1"}
	for name, l := range map[string]*ledger.Ledger{"many streams a read": l, "a stream a read": ledger.New(oneStreamAtATime{store})} {
		t.Run(name, func(t *testing.T) {
			var seen []int
			err := l.Histories(ctx, ids, func(i int, h *ledger.History, err error) error {
				seen = append(seen, i)
				want, wantErr := l.History(ctx, ids[i])
				if !reflect.DeepEqual(h, want) || (err == nil) != (wantErr == nil) || (err != nil && err.Error() != wantErr.Error()) {
					t.Errorf("%s: %+v, %v; History gives %+v, %v", ids[i], h, err, want, wantErr)
				}
				if ids[i] == "missing" && !errors.Is(err, domain.ErrReviewNotFound) {
					t.Errorf("missing: %v, want ErrReviewNotFound", err)
				}
				if ids[i] != "missing" && (h == nil || len(h.Events) != 2) {
					t.Errorf("%s: %+v, want its 2 events", ids[i], h)
				}
				return nil
			})
			if err != nil || !reflect.DeepEqual(seen, []int{0, 1, 2}) {
				t.Fatalf("Histories: %v, called for %v; want every review in order", err, seen)
			}
			stop := errors.New("stop")
			calls := 0
			if err := l.Histories(ctx, ids, func(int, *ledger.History, error) error { calls++; return stop }); !errors.Is(err, stop) || calls != 1 {
				t.Errorf("a callback's error: %v after %d calls, want it at once", err, calls)
			}
			if err := l.Histories(ctx, []string{"h1", "bad id"}, func(int, *ledger.History, error) error { return nil }); !errors.Is(err, domain.ErrInvalidReviewID) {
				t.Errorf("an invalid ID: %v, want ErrInvalidReviewID", err)
			}
		})
	}
}
