package ledger

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/clock"
)

// Watcher tells waiters when a review may have left pending: when an event
// that can end its automated path (a finding, an escalation) is appended to
// its stream. It tells at once of what is appended through its ledger and,
// while Follow runs, of what any process appends, read from the store's
// global order by one reader for the whole process however many waiters
// there are. A waiter reads the review again when told; waiting costs the
// database nothing.
type Watcher struct {
	store   eventstore.Store
	count   atomic.Int64 // waiters, so that appends with none cost a load
	mu      sync.Mutex
	waiters map[string][]*waiter
	// following is set while Follow reads the global order.
	following atomic.Bool
	// told moves on when Follow starts or stops, and before it tells of a
	// change it read that the snapshot the ledger keeps does not hold
	// (epoch, LoadWatched).
	told atomic.Uint64
	// kept is the ledger's snapshots; nil for a watcher of no ledger.
	kept interface {
		reflects(id string, rev uint64) reflection
	}
}

// epoch is where the watcher stands: how far its telling has come, and
// whether Follow was reading the global order.
type epoch struct {
	told      uint64
	following bool
	dropped   uint64 // the ledger's drops of snapshots the watcher relied on (snapshots.trusted)
}

// epoch returns where the watcher stands now.
func (w *Watcher) epoch() epoch {
	following := w.following.Load()
	return epoch{told: w.told.Load(), following: following}
}

// current reports whether nothing can have been told between e and now:
// Follow was reading the global order at e and has neither stopped nor
// told of a change since.
func (e epoch) current(now epoch) bool {
	return e.following && now.following && e.told == now.told
}

type waiter struct {
	ch   chan *Snapshot
	done bool // told or stopped; under Watcher.mu
}

func newWatcher(store eventstore.Store) *Watcher {
	return &Watcher{store: store, waiters: map[string][]*waiter{}}
}

// Watcher returns the ledger's watcher.
func (l *Ledger) Watcher() *Watcher { return l.watch }

// Watch returns a channel that receives once when, after Watch was called,
// the review may have left pending: the review as it stands then, when the
// change was made through this ledger, or nil (read it again) when it was
// made elsewhere; and a function to call when no longer interested. Read
// the review after Watch, not before, so that no change falls between the
// read and the wait.
func (w *Watcher) Watch(reviewID string) (changed <-chan *Snapshot, stop func()) {
	x := &waiter{ch: make(chan *Snapshot, 1)}
	w.mu.Lock()
	w.waiters[reviewID] = append(w.waiters[reviewID], x)
	w.mu.Unlock()
	w.count.Add(1)
	return x.ch, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if x.done {
			return
		}
		x.done = true
		w.count.Add(-1)
		list := w.waiters[reviewID]
		if i := slices.Index(list, x); i >= 0 {
			list = slices.Delete(list, i, i+1)
		}
		if len(list) == 0 {
			delete(w.waiters, reviewID)
		} else {
			w.waiters[reviewID] = list
		}
	}
}

// Waiting returns how many waiters there are.
func (w *Watcher) Waiting() int { return int(w.count.Load()) }

// Following reports whether Follow is reading the global order, so that
// changes made by other processes are told too.
func (w *Watcher) Following() bool { return w.following.Load() }

// changed tells the review's waiters, with the review as it stands when
// known (nil otherwise).
func (w *Watcher) changed(reviewID string, snap *Snapshot) {
	if w.count.Load() == 0 {
		return
	}
	w.mu.Lock()
	list := w.waiters[reviewID]
	delete(w.waiters, reviewID)
	for _, x := range list {
		x.done = true
	}
	w.mu.Unlock()
	for _, x := range list {
		w.count.Add(-1)
		x.ch <- snap
	}
}

// tellAll tells every waiter to read its review again.
func (w *Watcher) tellAll() {
	w.mu.Lock()
	all := w.waiters
	w.waiters = map[string][]*waiter{}
	for _, list := range all {
		for _, x := range list {
			x.done = true
		}
	}
	w.mu.Unlock()
	for _, list := range all {
		for _, x := range list {
			w.count.Add(-1)
			x.ch <- nil
		}
	}
}

// mayEndPending reports whether an event of the type can end a review's
// automated path.
func mayEndPending(typ string) bool {
	return typ == domain.TypeFindingReceived || typ == domain.TypeEscalated
}

// headReader is a store that can say where its global order ends now.
type headReader interface {
	Head(ctx context.Context) (eventstore.Position, error)
}

// headsReader is a store that can read its global order without the
// events' bodies (pgstore): all the watcher needs is streams and types.
type headsReader interface {
	ReadAllHeads(ctx context.Context, after eventstore.Position, limit int) ([]eventstore.RecordedEvent, error)
}

// read reads the next page of the global order after pos, without the
// bodies when the store can.
func (w *Watcher) read(ctx context.Context, pos eventstore.Position) ([]eventstore.RecordedEvent, error) {
	if hr, ok := w.store.(headsReader); ok {
		return hr.ReadAllHeads(ctx, pos, followPage)
	}
	return w.store.ReadAll(ctx, pos, followPage)
}

// ErrNoHead: the store cannot say where its global order ends, so Follow
// cannot start reading it.
var ErrNoHead = errors.New("the event store cannot tell the head of its global order")

// Follow reads the global order from its head now on, telling waiters of
// the reviews whose streams change, until ctx is done (then it returns
// nil). Reads that fail are tried again after retry. It needs a store that
// tells its head (pgstore, memstore); otherwise it returns ErrNoHead at
// once, and only changes made through this process's ledger are told.
func (w *Watcher) Follow(ctx context.Context, retry time.Duration) error {
	hr, ok := w.store.(headReader)
	if !ok {
		return ErrNoHead
	}
	var pos eventstore.Position
	for {
		var err error
		if pos, err = hr.Head(ctx); err == nil {
			break
		}
		if clock.Sleep(ctx, retry) != nil {
			return nil
		}
	}
	w.told.Add(1)
	w.following.Store(true)
	defer func() {
		w.following.Store(false)
		w.told.Add(1)
		// A change made after the last read is told to no one: every
		// waiter reads its review again (LoadWatched, too, may have
		// answered one from memory meanwhile).
		w.tellAll()
	}()
	for ctx.Err() == nil {
		evs, err := w.read(ctx, pos)
		if err == nil && len(evs) == 0 {
			err = w.store.WaitForEvents(ctx, pos)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if clock.Sleep(ctx, retry) != nil {
				return nil
			}
			continue
		}
		moved := false
		for _, e := range evs {
			if id, ok := strings.CutPrefix(e.Stream, domain.StreamName("")); ok && mayEndPending(e.Type) {
				r := reflectsNot
				if w.kept != nil {
					r = w.kept.reflects(id, e.Revision)
				}
				if r == reflectsWriting {
					continue // the write tells, with what it leads to (Ledger.write)
				}
				if !moved && r == reflectsNot {
					w.told.Add(1) // before telling of what a kept snapshot may not hold: see LoadWatched
					moved = true
				}
				w.changed(id, nil)
			}
		}
		if len(evs) > 0 {
			pos = evs[len(evs)-1].Position
		}
		if len(evs) < followPage {
			// At the head: let the next events gather for a moment (their
			// waiters here were told by the appends themselves).
			if clock.Sleep(ctx, followPace) != nil {
				return nil
			}
		}
	}
	return nil
}

// followPage is how many events one read of Follow takes; followPace is its
// pause at the head of the global order, which bounds how late a waiter
// hears of another process's change and how often the order is read.
const (
	followPage = 1000
	followPace = 10 * time.Millisecond
)
