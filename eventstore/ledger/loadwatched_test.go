package ledger_test

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
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/memstore"
)

// escalate escalates the review through l, as it stands in the store.
func escalate(t *testing.T, l *ledger.Ledger, id string) {
	t.Helper()
	ctx := context.Background()
	snap, err := l.Load(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	esc, _ := snap.Escalate(domain.ReasonCancelled, "", snap.SubmittedAt())
	if _, err := l.Append(ctx, snap, ledger.Actor{Name: "other"}, esc); err != nil {
		t.Fatal(err)
	}
}

// escalateFollowed escalates the review through l, which tells its waiters
// at once, and waits until Follow has read the escalation too and relied
// on the snapshot l keeps of it (read after the write kept it, or while
// the write was in flight).
func escalateFollowed(t *testing.T, l *ledger.Ledger, id string) {
	t.Helper()
	escalate(t, l, id)
	clocktest.Eventually(t, "Follow to read the escalation of "+id, func() bool { return ledger.Vouched(l, id) })
}

// create creates the reviews through l.
func create(t *testing.T, l *ledger.Ledger, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if _, err := l.Create(context.Background(), submitted(t, id), ledger.Actor{Name: "test"}); err != nil {
			t.Fatal(err)
		}
	}
}

// countingStore is a memstore that counts the reads of a stream.
type countingStore struct {
	*memstore.Store
	reads atomic.Int64
}

func (s *countingStore) ReadStream(ctx context.Context, stream string, from uint64) ([]eventstore.RecordedEvent, error) {
	s.reads.Add(1)
	return s.Store.ReadStream(ctx, stream, from)
}

// LoadWatched answers a pending review it keeps without reading the store
// only while Follow reads the global order and has told of no change
// since the review was kept; otherwise it reads, and so never answers
// pending for a review another process has taken out of pending, even
// when the telling of that change came before the waiter's watch.
func TestLoadWatched(t *testing.T) {
	t.Parallel()
	store := &countingStore{Store: memstore.New()}
	here, elsewhere := ledger.New(store), ledger.New(store)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	actor := ledger.Actor{Name: "test"}
	loadWatched := func(id string) (*ledger.Snapshot, bool) {
		t.Helper()
		before := store.reads.Load()
		snap, err := here.LoadWatched(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return snap, store.reads.Load() != before
	}

	// Not following: always read.
	if _, err := here.Create(ctx, submitted(t, "lw-early"), actor); err != nil {
		t.Fatal(err)
	}
	if _, read := loadWatched("lw-early"); !read {
		t.Fatal("answered from memory while Follow does not run")
	}

	w := here.Watcher()
	followed := make(chan error, 1)
	followCtx, stopFollow := context.WithCancel(ctx)
	go func() { followed <- w.Follow(followCtx, 10*time.Millisecond) }()
	clocktest.Eventually(t, "Follow following", w.Following)
	// Kept before Follow started: read.
	if _, read := loadWatched("lw-early"); !read {
		t.Fatal("answered from memory a review kept before Follow started")
	}

	// Written here while following: answered from memory, pending.
	snap, err := here.Create(ctx, submitted(t, "lw-1"), actor)
	if err != nil {
		t.Fatal(err)
	}
	got, read := loadWatched("lw-1")
	if read || got.State() != domain.StatePending || got.Version() != snap.Version() {
		t.Fatalf("a review written here: read %v, state %s, version %d", read, got.State(), got.Version())
	}

	// Another process escalates it; Follow tells the one waiter there is.
	// A watch set after that telling must not be answered pending.
	ch, stop := w.Watch("lw-1")
	defer stop()
	escalate(t, elsewhere, "lw-1")
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("the escalation by another process was not told")
	}
	late, stopLate := w.Watch("lw-1")
	defer stopLate()
	got, read = loadWatched("lw-1")
	if !read || got.State() != domain.StateManualReview {
		t.Fatalf("after another process escalated it: read %v, state %s", read, got.State())
	}
	select {
	case <-late:
		t.Fatal("a watch set after the change was told of it")
	default:
	}

	// Kept, but not pending: read.
	got, read = loadWatched("lw-1")
	if !read || got.State() != domain.StateManualReview {
		t.Fatalf("a review out of pending: read %v, state %s", read, got.State())
	}

	// Follow stopped: read again.
	if _, err := here.Create(ctx, submitted(t, "lw-2"), actor); err != nil {
		t.Fatal(err)
	}
	stopFollow()
	if err := <-followed; err != nil {
		t.Fatal(err)
	}
	if _, read := loadWatched("lw-2"); !read {
		t.Fatal("answered from memory after Follow stopped")
	}
}

// A change the kept snapshot already holds (one made through this ledger)
// does not move the watcher's epoch, so other reviews kept stay answered
// from memory, and dropping that snapshot later does not change that
// either (TestLoadWatchedAfterADrop covers what it does change).
func TestLoadWatchedAfterOwnChanges(t *testing.T) {
	t.Parallel()
	for _, drop := range []bool{false, true} {
		store := &countingStore{Store: memstore.New()}
		here := ledger.New(store)
		if drop {
			ledger.SetKept(here, 2)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		actor := ledger.Actor{Name: "test"}
		w := here.Watcher()
		go func() { _ = w.Follow(ctx, 10*time.Millisecond) }()
		clocktest.Eventually(t, "Follow following", w.Following)
		loadWatched := func(id string) bool {
			t.Helper()
			before := store.reads.Load()
			got, err := here.LoadWatched(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if got.State() != domain.StatePending {
				t.Fatalf("%s: %s", id, got.State())
			}
			return store.reads.Load() != before
		}
		if _, err := here.Create(ctx, submitted(t, "own-c"), actor); err != nil {
			t.Fatal(err)
		}
		create(t, here, "own-a")
		escalateFollowed(t, here, "own-a")
		if loadWatched("own-c") {
			t.Fatalf("dropped %v: own-c read from the store after Follow told of a change the ledger keeps", drop)
		}
		// With two kept, a third review drops the escalated one, which the
		// watcher relied on (own-c was used since).
		if _, err := here.Create(ctx, submitted(t, "own-d"), actor); err != nil {
			t.Fatal(err)
		}
		if loadWatched("own-c") {
			t.Fatalf("dropped %v: own-c read from the store after another review's snapshot was dropped", drop)
		}
		cancel()
	}
}

// slowStop is a memstore whose wait, once cancelled, takes a while to
// return, as a cancelled query does.
type slowStop struct{ *memstore.Store }

func (s slowStop) WaitForEvents(ctx context.Context, after eventstore.Position) error {
	err := s.Store.WaitForEvents(ctx, after)
	if ctx.Err() != nil {
		time.Sleep(200 * time.Millisecond)
	}
	return err
}

// While Follow is stopping it reads nothing more, yet LoadWatched may
// still answer from memory: a change another process makes then is told
// to no one, so when Follow stops every waiter is told to read again. On
// synctest's clock: Follow is stopped once it waits at the head, not after
// a guess at how long it takes to get there.
func TestFollowStoppingTellsEveryWaiter(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := slowStop{memstore.New()}
		here, elsewhere := ledger.New(store), ledger.New(store)
		ctx := context.Background()
		w := here.Watcher()
		followCtx, stopFollow := context.WithCancel(ctx)
		followed := make(chan error, 1)
		go func() { followed <- w.Follow(followCtx, 10*time.Millisecond) }()
		clocktest.Eventually(t, "Follow following", w.Following)
		if _, err := here.Create(ctx, submitted(t, "stopping"), ledger.Actor{Name: "test"}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // Follow has read the creation and waits at the head
		stopFollow()
		escalate(t, elsewhere, "stopping")
		ch, stop := w.Watch("stopping")
		defer stop()
		got, err := here.LoadWatched(ctx, "stopping")
		if err != nil {
			t.Fatal(err)
		}
		if err := <-followed; err != nil {
			t.Fatal(err)
		}
		if got.State() != domain.StatePending {
			return // read from the store: nothing to be told
		}
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatal("answered pending from memory while Follow stopped, and the waiter was never told")
		}
		if w.Waiting() != 0 {
			t.Fatalf("%d waiters left after Follow stopped", w.Waiting())
		}
	})
}

// slowRead holds up the next read of a stream once armed: the read is
// made at once, its answer given only when released.
type slowRead struct {
	armed    atomic.Bool
	read     chan struct{} // closed once the armed read is made
	released chan struct{}
}

func newSlowRead() *slowRead {
	return &slowRead{read: make(chan struct{}), released: make(chan struct{})}
}

// hold is called with a read made: when armed, it says so and waits for
// the release.
func (g *slowRead) hold() {
	if g.armed.CompareAndSwap(true, false) {
		close(g.read)
		<-g.released
	}
}

// gatedStore is a memstore whose next read of a stream, once armed, is
// slow (slowRead).
type gatedStore struct {
	*memstore.Store
	*slowRead
}

func (s *gatedStore) ReadStream(ctx context.Context, stream string, from uint64) ([]eventstore.RecordedEvent, error) {
	recs, err := s.Store.ReadStream(ctx, stream, from)
	s.hold()
	return recs, err
}

// A snapshot the watcher relied on for not moving its epoch is dropped; a
// read of that review made before the drop, answered after it, keeps what
// it read, which misses the change the watcher relied on: it is not
// trusted, and LoadWatched reads the store. The same when that drop is no
// longer remembered, because later ones took its place.
func TestLoadWatchedAfterADrop(t *testing.T) {
	t.Parallel()
	for _, forgotten := range []bool{false, true} {
		t.Run(fmt.Sprintf("forgotten=%v", forgotten), func(t *testing.T) { loadWatchedAfterADrop(t, forgotten) })
	}
}

func loadWatchedAfterADrop(t *testing.T, forgotten bool) {
	store := &gatedStore{Store: memstore.New(), slowRead: newSlowRead()}
	here := ledger.New(store)
	ledger.SetKept(here, 2)
	if forgotten {
		ledger.SetGone(here, 1)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := here.Watcher()
	go func() { _ = w.Follow(ctx, 10*time.Millisecond) }()
	clocktest.Eventually(t, "Follow following", w.Following)
	create(t, here, "drop-x")
	// A slow read of the pending review.
	store.armed.Store(true)
	slow := make(chan error, 1)
	go func() {
		_, err := here.Load(ctx, "drop-x")
		slow <- err
	}()
	<-store.read
	// Meanwhile it is escalated here, Follow reads that and relies on the
	// kept snapshot, and two more reviews drop it.
	escalateFollowed(t, here, "drop-x")
	create(t, here, "drop-y", "drop-z")
	if forgotten {
		// drop-z escalated here and relied on, then dropped by two more:
		// with one drop remembered, drop-x's is forgotten.
		escalateFollowed(t, here, "drop-z")
		create(t, here, "drop-v", "drop-w")
	}
	// The slow read comes back and keeps the pending review it read.
	close(store.released)
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
	got, err := here.LoadWatched(ctx, "drop-x")
	if err != nil {
		t.Fatal(err)
	}
	if got.State() != domain.StateManualReview {
		t.Fatalf("LoadWatched answered %s from a read made before the drop; the review is escalated", got.State())
	}
}

// decide takes the review, as this ledger has it, to a provider's
// accepted.
func decide(t *testing.T, l *ledger.Ledger, id string) *ledger.Snapshot {
	t.Helper()
	ctx := context.Background()
	snap, err := l.Load(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	start, err := snap.StartAttempt(snap.SubmittedAt())
	if err != nil {
		t.Fatal(err)
	}
	if snap, err = l.Append(ctx, snap, ledger.Actor{Name: "engine"}, start); err != nil {
		t.Fatal(err)
	}
	found, err := snap.RecordFinding(domain.Finding{ReviewID: id, Attempt: 1, State: domain.DecisionAccepted}, domain.SourceResponse, snap.SubmittedAt())
	if err != nil {
		t.Fatal(err)
	}
	if snap, err = l.Append(ctx, snap, ledger.Actor{Name: "engine"}, found...); err != nil {
		t.Fatal(err)
	}
	return snap
}

// Load answers a review it keeps in a terminal state without reading the
// store, the same review the store holds; it reads a kept review in any
// other state, and a terminal one it does not keep.
func TestLoadTerminalFromMemory(t *testing.T) {
	t.Parallel()
	store := &countingStore{Store: memstore.New()}
	here, elsewhere := ledger.New(store), ledger.New(store)
	ctx := context.Background()
	load := func(l *ledger.Ledger, id string) (*ledger.Snapshot, bool) {
		t.Helper()
		before := store.reads.Load()
		snap, err := l.Load(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return snap, store.reads.Load() != before
	}

	create(t, here, "lt-1", "lt-2", "lt-3")
	if _, read := load(here, "lt-1"); !read {
		t.Fatal("a pending review was answered without reading the store")
	}
	decided := decide(t, here, "lt-1")
	got, read := load(here, "lt-1")
	if read || got.State() != domain.StateAccepted || got.Version() != decided.Version() {
		t.Fatalf("a review decided here: read %v, state %s, version %d, want %d", read, got.State(), got.Version(), decided.Version())
	}
	fresh, _ := load(ledger.New(store), "lt-1")
	if fresh.State() != got.State() || fresh.Version() != got.Version() || fresh.DecidedAt() != got.DecidedAt() {
		t.Fatalf("answered %s at %d, the store holds %s at %d", got.State(), got.Version(), fresh.State(), fresh.Version())
	}

	// Escalated here: manual_review is not terminal, so it is read.
	escalate(t, here, "lt-2")
	if got, read := load(here, "lt-2"); !read || got.State() != domain.StateManualReview {
		t.Fatalf("a review in manual_review: read %v, state %s", read, got.State())
	}

	// Decided elsewhere: the pending review kept here is read, and once
	// read in its terminal state it is answered from memory.
	decide(t, elsewhere, "lt-3")
	if got, read := load(here, "lt-3"); !read || got.State() != domain.StateAccepted {
		t.Fatalf("a review decided elsewhere: read %v, state %s", read, got.State())
	}
	if _, read := load(here, "lt-3"); read {
		t.Fatal("a terminal review read once was read again")
	}
}
