package ledger_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/memstore"
)

var errLost = errors.New("connection lost (test)")

// lostAnswers fails its next batch as a whole once armed, having written
// it (write) or not.
type lostAnswers struct {
	store eventstore.Store
	armed atomic.Bool
	write bool
}

func (c *lostAnswers) Commit(ctx context.Context, appends []eventstore.StreamAppend, _ []*ledger.WorkChange) ([]eventstore.StreamResult, error) {
	if !c.armed.CompareAndSwap(true, false) {
		return c.store.AppendMulti(ctx, appends...)
	}
	if c.write {
		if _, err := c.store.AppendMulti(ctx, appends...); err != nil {
			return nil, err
		}
	}
	return nil, errLost
}

// A write whose batch failed as a whole is an UnsureError, and Landed
// tells whether it was stored: its own events, at the revisions it gave
// them; not another writer's at the same revisions.
func TestLandedTellsAnUnsureWrite(t *testing.T) {
	ctx := context.Background()
	actor := ledger.Actor{Name: "engine"}
	for _, c := range []struct {
		name         string
		write, other bool
		want         bool
	}{
		{"stored", true, false, true},
		{"not stored", false, false, false},
		{"another writer's events there", false, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			store := memstore.New()
			commits := &lostAnswers{store: store, write: c.write}
			l := ledger.New(store, ledger.Options{Committer: commits})
			rv, start := createdToStart(t, l, "r1", actor)
			commits.armed.Store(true)
			_, err := l.Append(ctx, rv, actor, start)
			var u *ledger.UnsureError
			if !errors.As(err, &u) || !errors.Is(err, errLost) {
				t.Fatalf("append in a failed batch: %v, want an UnsureError wrapping the batch's error", err)
			}
			if c.other { // the same step, written again by someone else
				other := ledger.New(store)
				if _, err := other.Append(ctx, rv, ledger.Actor{Name: "sweeper"}, start); err != nil {
					t.Fatal(err)
				}
			}
			snap, landed, err := l.Landed(ctx, u)
			if err != nil {
				t.Fatal(err)
			}
			if landed != c.want {
				t.Fatalf("Landed = %v, want %v", landed, c.want)
			}
			if wantVersion := map[bool]uint64{true: 1, false: 0}[c.write || c.other]; snap.Version() != wantVersion {
				t.Fatalf("review as stored now at version %d, want %d", snap.Version(), wantVersion)
			}
		})
	}
}

// A creation in a failed batch that was not stored: Landed says so, with
// no review.
func TestLandedOfACreationNotStored(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	commits := &lostAnswers{store: store}
	commits.armed.Store(true)
	l := ledger.New(store, ledger.Options{Committer: commits})
	_, err := l.Create(ctx, submitted(t, "r2"), ledger.Actor{Name: "platform"})
	var u *ledger.UnsureError
	if !errors.As(err, &u) {
		t.Fatalf("create in a failed batch: %v, want an UnsureError", err)
	}
	snap, landed, err := l.Landed(ctx, u)
	if err != nil || landed || snap != nil {
		t.Fatalf("Landed = %v, %v, %v; want no review, not landed, no error", snap, landed, err)
	}
}

// An append refused on its own (its check failed) is no UnsureError: it
// was certainly not written.
func TestAWrongVersionIsNotUnsure(t *testing.T) {
	ctx := context.Background()
	l := ledger.New(memstore.New())
	rv, start := createdToStart(t, l, "r3", ledger.Actor{Name: "platform"})
	if _, err := l.Append(ctx, rv, ledger.Actor{Name: "engine"}, start); err != nil {
		t.Fatal(err)
	}
	_, err := l.Append(ctx, rv, ledger.Actor{Name: "engine"}, start)
	var u *ledger.UnsureError
	if !errors.Is(err, eventstore.ErrWrongExpectedVersion) || errors.As(err, &u) {
		t.Fatalf("append on a moved review: %v, want ErrWrongExpectedVersion and not unsure", err)
	}
}

// slowBatch holds its batch until gate closes, then writes it.
type slowBatch struct {
	store eventstore.Store
	held  chan struct{}
	gate  chan struct{}
	armed atomic.Bool
}

func (c *slowBatch) Commit(ctx context.Context, appends []eventstore.StreamAppend, _ []*ledger.WorkChange) ([]eventstore.StreamResult, error) {
	if c.armed.CompareAndSwap(true, false) {
		close(c.held)
		<-c.gate
	}
	return c.store.AppendMulti(ctx, appends...)
}

// An append whose caller gave up while its batch was being written is
// unsure, and Landed waits for that batch before it reads: the write is
// then found stored, not taken for one that never was.
func TestLandedWaitsForTheBatchBeingWritten(t *testing.T) {
	store := memstore.New()
	commits := &slowBatch{store: store, held: make(chan struct{}), gate: make(chan struct{})}
	l := ledger.New(store, ledger.Options{Committer: commits})
	actor := ledger.Actor{Name: "engine"}
	rv, start := createdToStart(t, l, "r4", actor)
	commits.armed.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-commits.held; cancel() }()
	_, err := l.Append(ctx, rv, actor, start)
	var u *ledger.UnsureError
	if !errors.As(err, &u) || !errors.Is(err, context.Canceled) {
		t.Fatalf("append given up while written: %v, want an UnsureError of the context's end", err)
	}
	short, stop := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer stop()
	if _, _, err := l.Landed(short, u); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Landed while the batch is written, bounded: %v, want the bound's end", err)
	}
	answered := make(chan bool, 1)
	go func() {
		_, landed, err := l.Landed(context.Background(), u)
		if err != nil {
			t.Error(err)
		}
		answered <- landed
	}()
	select {
	case <-answered:
		t.Fatal("Landed answered while the batch was still being written")
	case <-time.After(50 * time.Millisecond):
	}
	close(commits.gate)
	if landed := <-answered; !landed {
		t.Fatal("Landed = false once the batch was written")
	}
}

// createdToStart creates review id and returns it with its first
// attempt's start, not yet appended.
func createdToStart(t *testing.T, l *ledger.Ledger, id string, actor ledger.Actor) (*ledger.Snapshot, domain.Event) {
	t.Helper()
	rv, err := l.Create(context.Background(), submitted(t, id), actor)
	if err != nil {
		t.Fatal(err)
	}
	start, err := rv.StartAttempt(t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return rv, start
}
