package ledger

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/eventstore"
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

func (c *gatedCommitter) Commit(_ context.Context, appends []eventstore.StreamAppend, _ []any) ([]eventstore.StreamResult, error) {
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
// it go together.
func TestWindowWithOneFlush(t *testing.T) {
	t.Parallel()
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
	for g.queued() != 1 {
		time.Sleep(time.Millisecond)
	}
	close(c.gate) // the next batch, of one, is under load: it waits
	time.Sleep(50 * time.Millisecond)
	appendTo("during-2")
	wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	if fmt.Sprint(c.batches) != "[1 2]" {
		t.Fatalf("batches %v, want [1 2]: the lone append at once, then the two gathered by the window", c.batches)
	}
}

// queued returns how many appends wait for a batch.
func (g *groupCommit) queued() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.queue)
}

// Stats show a batch being written and the appends waiting behind it,
// then the time spent once it is written.
func TestStatsShowTheBatchBeingWritten(t *testing.T) {
	t.Parallel()
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
	for g.queued() != 1 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	if st := g.snapshot(time.Now()); st.Waiting != 1 || st.Writing < 20*time.Millisecond || st.Batches != 0 {
		t.Fatalf("while the first batch is written: %+v, want 1 waiting and the batch in flight for 20ms or more", st)
	}
	close(c.gate)
	wg.Wait()
	if st := g.snapshot(time.Now()); st.Waiting != 0 || st.Writing != 0 || st.Batches != 2 || st.Appends != 2 || st.Seconds < 0.02 {
		t.Fatalf("once written: %+v, want 2 batches of 1, none in flight or waiting, 20ms or more spent", st)
	}
}
