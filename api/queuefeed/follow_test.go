package queuefeed

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
	"github.com/reviewledger/reviewledger/eventstore/memstore"
)

// countingStore counts the reads of the global order (and the calls in
// flight) of a memstore.
type countingStore struct {
	*memstore.Store
	reads    atomic.Int64
	inflight atomic.Int64
}

func (s *countingStore) enter() func() {
	s.reads.Add(1)
	s.inflight.Add(1)
	return func() { s.inflight.Add(-1) }
}

func (s *countingStore) ReadAll(ctx context.Context, after eventstore.Position, limit int) ([]eventstore.RecordedEvent, error) {
	defer s.enter()()
	return s.Store.ReadAll(ctx, after, limit)
}

func (s *countingStore) WaitForEvents(ctx context.Context, after eventstore.Position) error {
	defer s.enter()()
	return s.Store.WaitForEvents(ctx, after)
}

func (s *countingStore) Head(ctx context.Context) (eventstore.Position, error) {
	defer s.enter()()
	return s.Store.Head(ctx)
}

// newFollowed returns a feed over a counting store, following it until
// the test ends.
func newFollowed(t *testing.T, cfg Config) (*Feed, *countingStore) {
	t.Helper()
	store := &countingStore{Store: memstore.New()}
	cfg.Linger = 20 * time.Millisecond
	f := New(store, nil, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = f.Follow(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return f, store
}

var claims atomic.Int64

// claim appends a Claimed event of review id (a queue change) and returns
// its position.
func claim(t *testing.T, s eventstore.Store, id string) eventstore.Position {
	t.Helper()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	data, err := domain.EncodeEvent(domain.Claimed{ReviewID: id, Moderator: "mona", ClaimedAt: at, ExpiresAt: at.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	ev := eventstore.EventData{ID: fmt.Sprintf("00000000-0000-4000-8000-%012x", claims.Add(1)), Type: domain.TypeClaimed, Data: data}
	res, err := s.Append(context.Background(), domain.StreamName(id), eventstore.Any, ev)
	if err != nil {
		t.Fatal(err)
	}
	return res.Position
}

func claimAll(t *testing.T, s eventstore.Store, ids ...string) []eventstore.Position {
	t.Helper()
	var out []eventstore.Position
	for _, id := range ids {
		out = append(out, claim(t, s, id))
	}
	return out
}

// waitPaused waits until the feed has stopped following the ledger: its
// session ended (not started) and no read of the store in flight.
func waitPaused(t *testing.T, f *Feed, s *countingStore) {
	t.Helper()
	clocktest.Eventually(t, "the feed pauses", func() bool {
		f.mu.Lock()
		started := f.started
		f.mu.Unlock()
		return !started && s.inflight.Load() == 0
	})
}

// collect reads n changes after pos as a stream does, then checks that no
// more are there.
func collect(t *testing.T, f *Feed, after eventstore.Position, n int) []Change {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []Change
	for len(out) < n {
		changes, next, wake, err := f.Next(ctx, after, 100)
		if err != nil {
			t.Fatalf("Next after %v: %v (after %d changes)", after, err, len(out))
		}
		out, after = append(out, changes...), next
		if len(changes) == 0 {
			select {
			case <-wake:
			case <-ctx.Done():
				t.Fatalf("%d changes, want %d", len(out), n)
			}
		}
	}
	if more, _, _, err := f.Next(ctx, after, 100); len(more) > 0 || err != nil {
		t.Fatalf("after %d changes: %d more, %v", n, len(more), err)
	}
	return out
}

func wantChanges(t *testing.T, got []Change, ids []string, at []eventstore.Position) {
	t.Helper()
	if len(got) != len(ids) {
		t.Fatalf("%d changes, want %d", len(got), len(ids))
	}
	for i, c := range got {
		if c.Type != Claimed || c.ReviewID != ids[i] || c.Position != at[i] {
			t.Fatalf("change %d: %s %s at %v, want claimed %s at %v", i, c.Type, c.ReviewID, c.Position, ids[i], at[i])
		}
	}
}

// Without an open stream the feed does not read the ledger: not before
// the first stream, nor once the last one has closed (after the linger).
// On synctest's clock, so that "nothing read" is checked once every
// goroutine the appends woke is waiting again, not after a guessed time.
func TestFeedReadsNothingWithoutStreams(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, store := newFollowed(t, Config{})
		claimAll(t, store, "a", "b", "c")
		synctest.Wait() // whatever the appends woke has run and waits again
		if n := store.reads.Load(); n != 0 {
			t.Fatalf("%d reads before any stream opened", n)
		}
		closeStream := f.Open()
		head, err := f.Head(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		at := claimAll(t, store, "d")
		wantChanges(t, collect(t, f, head, 1), []string{"d"}, at)
		closeStream()
		waitPaused(t, f, store)
		reads := store.reads.Load()
		claimAll(t, store, "e", "f", "g")
		synctest.Wait() // whatever the appends woke has run and waits again
		if n := store.reads.Load() - reads; n != 0 {
			t.Fatalf("%d reads after the last stream closed", n)
		}
	})
}

// A stream opened after a pause starts at the head of the ledger then and
// gets every change appended after it, none from before.
func TestFeedStreamAfterPause(t *testing.T) {
	f, store := newFollowed(t, Config{})
	closeFirst := f.Open()
	if _, err := f.Head(t.Context()); err != nil {
		t.Fatal(err)
	}
	closeFirst()
	waitPaused(t, f, store)
	before := claimAll(t, store, "a", "b")
	closeStream := f.Open()
	defer closeStream()
	head, err := f.Head(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if head != before[1] {
		t.Fatalf("head %v after the pause, want %v", head, before[1])
	}
	ids := []string{"c", "d", "e"}
	at := claimAll(t, store, ids...)
	wantChanges(t, collect(t, f, head, len(ids)), ids, at)
}

// A stream resuming with a Last-Event-ID from before a pause gets every
// change after it exactly once and in order: the ones from before the
// feed started again from the ledger, a page at a time, then the buffer's.
func TestFeedResumeAcrossPause(t *testing.T) {
	f, store := newFollowed(t, Config{Page: 2})
	closeStream := f.Open()
	head, err := f.Head(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{"a", "b", "c"}
	at := claimAll(t, store, ids...)
	wantChanges(t, collect(t, f, head, len(ids)), ids, at)
	closeStream()
	waitPaused(t, f, store)
	paused := []string{"d", "e", "f"}
	at = append(at, claimAll(t, store, paused...)...)
	closeStream = f.Open()
	defer closeStream()
	if _, err := f.Head(t.Context()); err != nil {
		t.Fatal(err)
	}
	live := []string{"g", "h"}
	at = append(at, claimAll(t, store, live...)...)
	want := append(append([]string{"b", "c"}, paused...), live...)
	wantChanges(t, collect(t, f, at[0], len(want)), want, at[1:])
}
