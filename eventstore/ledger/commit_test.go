package ledger

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
)

// gatedCommitter records each batch's size; the first Commit waits for
// gate to close.
type gatedCommitter struct {
	gate    chan struct{}
	mu      sync.Mutex
	batches []int
	first   sync.Once
	started chan struct{}
}

func (c *gatedCommitter) Commit(_ context.Context, appends []eventstore.StreamAppend, _ []*WorkChange) ([]eventstore.StreamResult, error) {
	c.first.Do(func() {
		close(c.started)
		<-c.gate
	})
	c.mu.Lock()
	c.batches = append(c.batches, len(appends))
	c.mu.Unlock()
	return make([]eventstore.StreamResult, len(appends)), nil
}

// With one flush at a time and a window, a batch gathered while the one
// before was written waits the window for more: the appends made during
// it go together. On synctest's clock: the window passes only once every
// goroutine waits, so no load on the machine can close it early.
func TestWindowWithOneFlush(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := &gatedCommitter{gate: make(chan struct{}), started: make(chan struct{})}
		g := newGroupCommit(c, GroupCommit{Flushes: 1, Window: 300 * time.Millisecond})
		var wg sync.WaitGroup
		appendTo := func(stream string) {
			wg.Go(func() {
				if _, err := g.append(context.Background(), eventstore.StreamAppend{Stream: stream}, nil); err != nil {
					t.Errorf("append %s: %v", stream, err)
				}
			})
		}
		appendTo("lone")
		<-c.started // the lone append is being written
		appendTo("during-1")
		synctest.Wait()
		if n := g.queued(); n != 1 {
			t.Fatalf("%d appends queued behind the lone one, want 1", n)
		}
		close(c.gate)                     // the next batch, of one, is under load: it waits
		synctest.Wait()                   // the writer waits for the window
		time.Sleep(50 * time.Millisecond) // within the window
		appendTo("during-2")
		wg.Wait()
		c.mu.Lock()
		defer c.mu.Unlock()
		if fmt.Sprint(c.batches) != "[1 2]" {
			t.Fatalf("batches %v, want [1 2]: the lone append at once, then the two gathered by the window", c.batches)
		}
	})
}

// queued returns how many appends wait for a batch.
func (g *groupCommit) queued() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.queue)
}

// Stats show a batch being written and the appends waiting behind it,
// then the time spent once it is written (on synctest's clock, so that
// the 20 ms the batch is held are exactly 20 ms).
func TestStatsShowTheBatchBeingWritten(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := &gatedCommitter{gate: make(chan struct{}), started: make(chan struct{})}
		g := newGroupCommit(c, GroupCommit{Flushes: 1})
		var wg sync.WaitGroup
		for _, stream := range []string{"first", "behind"} {
			wg.Go(func() {
				if _, err := g.append(context.Background(), eventstore.StreamAppend{Stream: stream}, nil); err != nil {
					t.Errorf("append %s: %v", stream, err)
				}
			})
			if stream == "first" {
				<-c.started
			}
		}
		synctest.Wait()
		time.Sleep(20 * time.Millisecond)
		if st := g.snapshot(time.Now()); st.Waiting != 1 || st.Writing != 20*time.Millisecond || st.Batches != 0 {
			t.Fatalf("while the first batch is written: %+v, want 1 waiting and the batch in flight for 20ms", st)
		}
		close(c.gate)
		wg.Wait()
		if st := g.snapshot(time.Now()); st.Waiting != 0 || st.Writing != 0 || st.Batches != 2 || st.Appends != 2 || st.Seconds < 0.02 {
			t.Fatalf("once written: %+v, want 2 batches of 1, none in flight or waiting, 20ms or more spent", st)
		}
	})
}

// orderCommitter records the streams and first event types it writes, in
// order; a batch holding an append whose first event is of type hold
// waits for gate to close.
type orderCommitter struct {
	hold    string
	gate    chan struct{}
	held    chan struct{}
	mu      sync.Mutex
	written []string
}

func (c *orderCommitter) Commit(_ context.Context, appends []eventstore.StreamAppend, _ []*WorkChange) ([]eventstore.StreamResult, error) {
	for _, a := range appends {
		if a.Events[0].Type == c.hold {
			close(c.held)
			<-c.gate
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range appends {
		c.written = append(c.written, a.Stream+"/"+a.Events[0].Type)
	}
	return make([]eventstore.StreamResult, len(appends)), nil
}

func (c *orderCommitter) order() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprint(c.written)
}

// With two batches written at once, an append to a stream whose earlier
// append is being written waits for it, while other streams go on.
func TestAppendsToOneStreamInOrderWithTwoFlushes(t *testing.T) {
	t.Parallel()
	c := &orderCommitter{hold: "first", gate: make(chan struct{}), held: make(chan struct{})}
	g := newGroupCommit(c, GroupCommit{Flushes: 2})
	var wg sync.WaitGroup
	appendTo := func(stream, typ string) {
		wg.Go(func() {
			a := eventstore.StreamAppend{Stream: stream, Events: []eventstore.EventData{{Type: typ}}}
			if _, err := g.append(context.Background(), a, nil); err != nil {
				t.Errorf("append %s/%s: %v", stream, typ, err)
			}
		})
	}
	appendTo("s", "first")
	<-c.held // s/first is being written
	appendTo("s", "second")
	clocktest.Eventually(t, "s/second queued", func() bool { return g.queued() == 1 })
	appendTo("t", "other") // the second writer writes it meanwhile
	clocktest.Eventually(t, "t/other written", func() bool { return c.order() != "[]" })
	if got := c.order(); got != "[t/other]" {
		t.Fatalf("written %s while s/first is being written, want t/other only", got)
	}
	if n := g.queued(); n != 1 {
		t.Fatalf("%d appends queued while s/first is written, want s/second", n)
	}
	close(c.gate)
	wg.Wait()
	if got := c.order(); got != "[t/other s/first s/second]" {
		t.Fatalf("written %s, want t/other, then s/first and s/second in the order made", got)
	}
}

// An append waiting for a window to pass is still queued: its caller's
// context ending withdraws it, and it is never written, not even once the
// window has passed (on synctest's clock: the writer has woken, found
// nothing and stopped before the check).
func TestWithdrawnWhileTheWindowGathers(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := &orderCommitter{hold: "lone", gate: make(chan struct{}), held: make(chan struct{})}
		g := newGroupCommit(c, GroupCommit{Flushes: 1, Window: 300 * time.Millisecond})
		lone := make(chan error, 1)
		go func() {
			_, err := g.append(context.Background(), eventstore.StreamAppend{Stream: "a", Events: []eventstore.EventData{{Type: "lone"}}}, nil)
			lone <- err
		}()
		<-c.held
		ctx, cancel := context.WithCancel(context.Background())
		gathered := make(chan error, 1)
		go func() {
			_, err := g.append(ctx, eventstore.StreamAppend{Stream: "b", Events: []eventstore.EventData{{Type: "gathered"}}}, nil)
			gathered <- err
		}()
		synctest.Wait()
		if n := g.queued(); n != 1 {
			t.Fatalf("%d appends queued behind a/lone, want b", n)
		}
		close(c.gate) // the writer now waits the window, b queued
		if err := <-lone; err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the writer waits for the window
		cancel()
		err := <-gathered
		var u errUnsure
		if !errors.Is(err, context.Canceled) || errors.As(err, &u) {
			t.Fatalf("withdrawn during the window: %v, want context.Canceled, nothing written", err)
		}
		time.Sleep(400 * time.Millisecond) // the window passes
		synctest.Wait()
		if got := c.order(); got != "[a/lone]" {
			t.Fatalf("written %s, want only a/lone", got)
		}
	})
}
