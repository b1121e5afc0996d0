package ledger_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/memstore"
)

// gatedCommitter writes through the store; once armed, its next commit is
// stored at once but answered only when released (with an error when
// fail is set): the watcher can read the write's events before the writer
// hears of them.
type gatedCommitter struct {
	store     eventstore.Store
	armed     atomic.Bool
	fail      bool
	committed chan struct{}
	release   chan struct{}
}

func (g *gatedCommitter) Commit(ctx context.Context, appends []eventstore.StreamAppend, _ []*ledger.WorkChange) ([]eventstore.StreamResult, error) {
	res, err := g.store.AppendMulti(ctx, appends...)
	if g.armed.CompareAndSwap(true, false) {
		close(g.committed)
		<-g.release
		if g.fail {
			return nil, errors.New("connection lost after the commit")
		}
	}
	return res, err
}

// ownWrite is a ledger following its store, whose next write is gated, and
// a review "bystander" kept current, answered from memory.
type ownWrite struct {
	store *countingStore
	gate  *gatedCommitter
	here  *ledger.Ledger
}

func newOwnWrite(t *testing.T, fail bool, ids ...string) *ownWrite {
	t.Helper()
	store := &countingStore{Store: memstore.New()}
	gate := &gatedCommitter{store: store, fail: fail, committed: make(chan struct{}), release: make(chan struct{})}
	o := &ownWrite{store: store, gate: gate, here: ledger.New(store, ledger.Options{Committer: gate})}
	following(t, o.here)
	create(t, o.here, append([]string{"bystander"}, ids...)...)
	if _, read := o.loadWatched(t, "bystander"); read {
		t.Fatal("a review written here while following was read from the store")
	}
	return o
}

// loadWatched is LoadWatched, and whether it read the store.
func (o *ownWrite) loadWatched(t *testing.T, id string) (*ledger.Snapshot, bool) {
	t.Helper()
	before := o.store.reads.Load()
	snap, err := o.here.LoadWatched(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return snap, o.store.reads.Load() != before
}

// gated starts write in the background with the gate armed and returns
// once its events are stored and the watcher has relied on the write, and
// the channel the write's error comes on once released.
func (o *ownWrite) gated(t *testing.T, id string, write func() error) <-chan error {
	t.Helper()
	o.gate.armed.Store(true)
	done := make(chan error, 1)
	go func() { done <- write() }()
	waitFor(t, o.gate.committed, "the write did not reach the store")
	clocktest.Eventually(t, "Follow to read the write's events", func() bool { return ledger.Relied(o.here, id) })
	return done
}

// watchedEscalation watches review "own" and starts escalating it through
// the gated committer (failing when fail), stopping the watch in cleanup.
func watchedEscalation(t *testing.T, fail bool) (o *ownWrite, ch <-chan *ledger.Snapshot, done <-chan error) {
	t.Helper()
	o = newOwnWrite(t, fail, "own")
	ch, stop := o.here.Watcher().Watch("own")
	t.Cleanup(stop)
	return o, ch, o.gated(t, "own", func() error { return escalateErr(o.here, "own") })
}

// Follow reads this process's own write before the writer has kept what it
// leads to: it does not move the epoch (a bystander's long-poll is still
// answered from memory) and does not tell the review's waiters, which the
// write then tells with the review as it stands.
func TestFollowReadsAnOwnWriteFirst(t *testing.T) {
	t.Parallel()
	o, ch, done := watchedEscalation(t, false)
	select {
	case snap := <-ch:
		t.Fatalf("told %v before the write was answered", snap)
	default:
	}
	if _, read := o.loadWatched(t, "bystander"); read {
		t.Fatal("the epoch moved for this process's own write")
	}
	close(o.gate.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	select {
	case snap := <-ch:
		if snap == nil || snap.State() != domain.StateManualReview {
			t.Fatalf("told %v, want the escalated review", snap)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the write did not tell its waiter")
	}
	if !ledger.Vouched(o.here, "own") {
		t.Fatal("the snapshot the write kept is not marked as relied on: its drop would go unremembered")
	}
}

// The same write failing after its events were stored and read: the epoch
// moves (the bystander is read from the store), the waiter is told to read
// again, and what it reads is what was stored.
func TestFollowReadsAnOwnWriteThatFails(t *testing.T) {
	t.Parallel()
	o, ch, done := watchedEscalation(t, true)
	close(o.gate.release)
	if err := <-done; err == nil {
		t.Fatal("the failed commit was not reported")
	}
	toldToReadAgain(t, ch, "the failed write did not tell its waiter")
	if _, read := o.loadWatched(t, "bystander"); !read {
		t.Fatal("the epoch did not move for a write that failed after the watcher relied on it")
	}
	if got, _ := o.loadWatched(t, "own"); got.State() != domain.StateManualReview {
		t.Fatalf("read %s, want the stored escalation", got.State())
	}
}

// While a write of the review is in flight here, another process appends
// after it: that change is beyond what the write keeps, so the epoch moves
// and the waiter is told at once, before the write is answered.
func TestFollowReadsAChangeBeyondAnOwnWrite(t *testing.T) {
	t.Parallel()
	o := newOwnWrite(t, false, "own")
	elsewhere := ledger.New(o.store)
	ctx := context.Background()
	snap, err := o.here.Load(ctx, "own")
	if err != nil {
		t.Fatal(err)
	}
	start, err := snap.StartAttempt(snap.SubmittedAt())
	if err != nil {
		t.Fatal(err)
	}
	ch, stop := o.here.Watcher().Watch("own")
	defer stop()
	done := gatedAppend(t, o.gate, o.here, snap, "engine", "the write did not reach the store", start)
	// The attempt is stored; another process records its finding.
	there, err := elsewhere.Load(ctx, "own")
	if err != nil {
		t.Fatal(err)
	}
	found, err := there.RecordFinding(domain.Finding{ReviewID: "own", Attempt: 1, State: domain.DecisionAccepted}, domain.SourceCallback, there.SubmittedAt())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := elsewhere.Append(ctx, there, ledger.Actor{Name: "other"}, found...); err != nil {
		t.Fatal(err)
	}
	toldToReadAgain(t, ch, "the other process's finding was not told while the write was in flight")
	if _, read := o.loadWatched(t, "bystander"); !read {
		t.Fatal("the epoch did not move for a change beyond the write in flight")
	}
	close(o.gate.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// escalateErr escalates the review through l as l has it.
func escalateErr(l *ledger.Ledger, id string) error {
	ctx := context.Background()
	snap, err := l.Load(ctx, id)
	if err != nil {
		return err
	}
	esc, err := snap.Escalate(domain.ReasonCancelled, "", snap.SubmittedAt())
	if err != nil {
		return err
	}
	_, err = l.Append(ctx, snap, ledger.Actor{Name: "other"}, esc)
	return err
}

// heldStore holds Follow's next read of the global order, once armed,
// until released: a watcher that lags.
type heldStore struct {
	*memstore.Store
	hold    atomic.Bool
	held    chan struct{}
	release chan struct{}
}

func (s *heldStore) ReadAll(ctx context.Context, after eventstore.Position, limit int) ([]eventstore.RecordedEvent, error) {
	if s.hold.CompareAndSwap(true, false) {
		close(s.held)
		<-s.release
	}
	return s.Store.ReadAll(ctx, after, limit)
}

// Another process escalates a review that a waiter here long-polls; before
// Follow reads that, this process loads the review, drops it from its
// keeping, and writes a claim on it, the commit slow. The escalation is
// not the claim's (it was stored before), so Follow tells the waiter at
// once and moves the epoch, as it would with no write in flight.
func TestFollowReadsAChangeBeforeAnOwnWrite(t *testing.T) {
	t.Parallel()
	store := &heldStore{Store: memstore.New(), held: make(chan struct{}), release: make(chan struct{})}
	gate := &gatedCommitter{store: store, committed: make(chan struct{}), release: make(chan struct{})}
	here, elsewhere := ledger.New(store, ledger.Options{Committer: gate}), ledger.New(store)
	ledger.SetKept(here, 1)
	ctx := context.Background()
	w := following(t, here)
	create(t, here, "y", "x")
	ch, stop := w.Watch("x")
	defer stop()
	if snap, err := here.LoadWatched(ctx, "x"); err != nil || snap.State() != domain.StatePending {
		t.Fatalf("LoadWatched = %v, %v", snap, err)
	}
	store.hold.Store(true)
	escalate(t, elsewhere, "x")
	waitFor(t, store.held, "Follow did not read the global order")
	snap, err := here.Load(ctx, "x")
	if err != nil || snap.State() != domain.StateManualReview {
		t.Fatalf("Load = %v, %v", snap, err)
	}
	if _, err := here.Load(ctx, "y"); err != nil { // one kept: x is dropped
		t.Fatal(err)
	}
	claim, err := snap.Claim("moderator", time.Minute, snap.SubmittedAt())
	if err != nil {
		t.Fatal(err)
	}
	done := gatedAppend(t, gate, here, snap, "moderator", "the claim did not reach the store", claim)
	close(store.release)
	toldToReadAgain(t, ch, "the waiter was not told of the escalation another process made")
	close(gate.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// probeStore is a heldStore whose next read of a stream, once armed, is
// slow (slowRead: a slow Load); it counts the reads of streams.
type probeStore struct {
	heldStore
	slow  *slowRead
	reads atomic.Int64
}

func (s *probeStore) ReadStream(ctx context.Context, stream string, from uint64) ([]eventstore.RecordedEvent, error) {
	s.reads.Add(1)
	recs, err := s.Store.ReadStream(ctx, stream, from)
	s.slow.hold()
	return recs, err
}

// Two writes of one review here from the same snapshot: A escalates it
// and tells; B, doomed, is still in flight when Follow reads A's
// escalation at the revision B would write. Meanwhile A's snapshot was
// dropped and a slow read put back the pending one. That read is not
// trusted (a written snapshot is relied on, so its drop is remembered):
// a new waiter's LoadWatched reads the store instead of answering pending.
func TestFollowLeavesAnEarlierWriteToAnotherInFlight(t *testing.T) {
	t.Parallel()
	store := &probeStore{heldStore: heldStore{Store: memstore.New(), held: make(chan struct{}), release: make(chan struct{})},
		slow: newSlowRead()}
	gate := &gatedCommitter{store: store, committed: make(chan struct{}), release: make(chan struct{})}
	here, elsewhere := ledger.New(store, ledger.Options{Committer: gate}), ledger.New(store)
	ledger.SetKept(here, 1)
	ctx := context.Background()
	w := following(t, here)
	create(t, here, "y", "x")
	snap, err := here.Load(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	store.hold.Store(true) // Follow lags from here on
	create(t, elsewhere, "z")
	waitFor(t, store.held, "Follow did not read the global order")

	store.slow.armed.Store(true) // a slow Load of x, pending
	slow := make(chan error, 1)
	go func() {
		_, err := here.Load(ctx, "x")
		slow <- err
	}()
	waitFor(t, store.slow.read, "the slow Load did not read")

	early, stopEarly := w.Watch("x")
	defer stopEarly()
	esc, err := snap.Escalate(domain.ReasonCancelled, "", snap.SubmittedAt())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := here.Append(ctx, snap, ledger.Actor{Name: "a"}, esc); err != nil {
		t.Fatal(err)
	}
	select {
	case told := <-early:
		if told == nil || told.State() != domain.StateManualReview {
			t.Fatalf("A told %v", told)
		}
	default:
		t.Fatal("A did not tell its waiter")
	}
	start, err := snap.StartAttempt(snap.SubmittedAt())
	if err != nil {
		t.Fatal(err)
	}
	doomed := gatedAppend(t, gate, here, snap, "b", "B did not reach the store", start)
	if _, err := here.Load(ctx, "y"); err != nil { // one kept: x is dropped
		t.Fatal(err)
	}
	close(store.slow.released) // the slow Load keeps x pending
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
	close(store.release) // Follow reads A's escalation, at B's revision
	clocktest.Eventually(t, "Follow to leave the escalation to B", func() bool { return ledger.Relied(here, "x") })
	late, stopLate := w.Watch("x")
	defer stopLate()
	before := store.reads.Load()
	got, err := here.LoadWatched(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if store.reads.Load() == before || got.State() != domain.StateManualReview {
		t.Errorf("LoadWatched answered %s at %d (read the store: %v) after A told the escalation",
			got.State(), got.Version(), store.reads.Load() != before)
	}
	close(gate.release)
	if err := <-doomed; err == nil {
		t.Fatal("B, written from a stale snapshot, succeeded")
	}
	select {
	case <-late:
	case <-time.After(5 * time.Second):
		t.Fatal("the new waiter was never told")
	}
}

// following runs Follow on l's watcher until the test ends, and returns
// the watcher once it follows.
func following(t *testing.T, l *ledger.Ledger) *ledger.Watcher {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := l.Watcher()
	followed := make(chan error, 1)
	go func() { followed <- w.Follow(ctx, 10*time.Millisecond) }()
	t.Cleanup(func() {
		cancel()
		if err := <-followed; err != nil {
			t.Error(err)
		}
	})
	clocktest.Eventually(t, "Follow following", w.Following)
	return w
}

// waitFor fails the test unless ch is closed within 5 s.
func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal(what)
	}
}

// toldToReadAgain fails the test unless ch tells, within 5 s, to read the
// review again (a nil snapshot).
func toldToReadAgain(t *testing.T, ch <-chan *ledger.Snapshot, what string) {
	t.Helper()
	select {
	case told := <-ch:
		if told != nil {
			t.Fatalf("told %v, want a read again", told)
		}
	case <-time.After(5 * time.Second):
		t.Fatal(what)
	}
}

// gatedAppend appends events to snap through l with gate armed, and
// returns once they are stored, with the channel the append's error comes
// on once the gate is released.
func gatedAppend(t *testing.T, gate *gatedCommitter, l *ledger.Ledger, snap *ledger.Snapshot, actor, what string, events ...domain.Event) <-chan error {
	t.Helper()
	gate.armed.Store(true)
	done := make(chan error, 1)
	go func() {
		_, err := l.Append(context.Background(), snap, ledger.Actor{Name: actor}, events...)
		done <- err
	}()
	waitFor(t, gate.committed, what)
	return done
}
