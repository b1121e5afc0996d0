package ledger

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore"
)

// snapshotCacheSize bounds the snapshots a ledger keeps.
const snapshotCacheSize = 20000

// snapshots keeps the latest snapshot the ledger read or wrote of recently
// used reviews, so that loading one again reads only what was appended
// since: the last event it knows (its hash must still be the one it
// chained onto: a history rewritten meanwhile is read again from the start)
// and any after it, so a review changed by another process is seen as it
// is. Two reads are answered without it: a review kept in a terminal state
// (Load; nothing can follow it) and a long-poll's first read while the
// watcher vouches for the kept snapshot (LoadWatched).
type snapshots struct {
	mu    sync.Mutex
	byID  map[string]*list.Element
	order *list.List // front: most recently used
	size  int        // at most this many kept
	// Snapshots the watcher relied on (reflects) that were dropped to make
	// room, remembered for a while: a snapshot of the review read before
	// the drop and kept after it may miss what the watcher did not tell
	// (put). dropped counts such drops; gone holds the review of each of
	// the last goneSize of them, with the number of its last drop;
	// forgotten counts those no longer remembered.
	dropped   atomic.Uint64 // written under mu; read without it by drops
	forgotten uint64
	gone      map[string]uint64
	goneOrder []goneDrop // a ring of the drops remembered, oldest at goneNext
	goneNext  int
	goneCap   int // drops remembered at most (goneSize)
	// writing counts this ledger's writes in flight by review, and
	// whether the watcher relied on one of them (reflects): a write keeps
	// the snapshot it leads to before it tells the review's waiters
	// (written), and a write that fails after the watcher relied on it
	// moves the epoch and tells them to read again (abandoned, Ledger.write).
	writing map[string]inFlight
}

// inFlight is what snapshots.writing holds of a review.
type inFlight struct {
	writes []revisions // the revisions each write in flight writes
	relied bool        // the watcher read one of their events and relied on them
}

// revisions are the revisions one write writes, first to last.
type revisions struct{ first, last uint64 }

// writing reports whether one of the writes writes revision rev.
func (w inFlight) writing(rev uint64) bool {
	for _, r := range w.writes {
		if r.first <= rev && rev <= r.last {
			return true
		}
	}
	return false
}

// reflection is what reflects found of a review's change.
type reflection int

const (
	reflectsNot     reflection = iota // the kept snapshot may miss it
	reflectsKept                      // the kept snapshot holds it
	reflectsWriting                   // a write in flight here will keep it, or move the epoch
)

type goneDrop struct {
	id string
	n  uint64
}

// goneSize bounds the drops remembered: a read that takes longer than
// goneSize drops to come back keeps its snapshot untrusted.
const goneSize = 4096

type cached struct {
	id   string
	snap *Snapshot
	seen epoch // when snap was read or written; following false: not to be trusted (LoadWatched)
	// vouched: the watcher did not move its epoch for a change because
	// this snapshot already held it (reflects), or it was written here
	// (written).
	vouched bool
}

func newSnapshots(size int) *snapshots {
	return &snapshots{byID: make(map[string]*list.Element), order: list.New(), size: size,
		gone: make(map[string]uint64), goneCap: goneSize, writing: make(map[string]inFlight)}
}

// reflects reports whether the snapshot kept of the review holds its
// event at revision rev, and marks it as relied on when it does: while it
// is kept, no older snapshot of the review can take its place (put keeps
// the newer), and once it is dropped, one read before the drop is not
// trusted (put). Otherwise, when a write of this ledger in flight writes
// revision rev of the review (the watcher can read a write's events before
// the writer has kept what they lead to), it marks the writes as relied on
// and reports reflectsWriting: the event is that write's if the write
// succeeds, so the write keeps a snapshot holding it, relied on too, and
// tells the waiters (the event can end pending, so the write does); a
// write that fails moves the epoch and tells them. An event at another
// revision (stored before the write, or after it) is not the write's to
// tell.
func (c *snapshots) reflects(id string, rev uint64) reflection {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byID[id]; ok {
		if x := el.Value.(*cached); x.snap.Exists() && x.snap.Version() >= rev {
			x.vouched = true
			return reflectsKept
		}
	}
	if w, ok := c.writing[id]; ok && w.writing(rev) {
		w.relied = true
		c.writing[id] = w
		return reflectsWriting
	}
	return reflectsNot
}

// begin records a write in flight of the review's revisions first to last.
func (c *snapshots) begin(id string, revs revisions) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.writing[id]
	w.writes = append(w.writes, revs)
	c.writing[id] = w
}

// end ends the write begun with begin(id, revs) and reports whether the
// watcher relied on the review's writes in flight; under mu.
func (c *snapshots) end(id string, revs revisions) (relied bool) {
	w := c.writing[id]
	if i := slices.Index(w.writes, revs); i >= 0 {
		w.writes = slices.Delete(w.writes, i, i+1)
	}
	if len(w.writes) == 0 {
		delete(c.writing, id)
	} else {
		c.writing[id] = w
	}
	return w.relied
}

// written keeps the snapshot a write led to (put), relied on, and ends
// the write. Relied on whether or not the watcher has read the write's
// events yet: it may read them only after this snapshot was dropped, and
// leave them to another write of the review in flight here at the same
// revisions (one bound to fail), moving no epoch until that write fails;
// a snapshot read before the drop must not be trusted meanwhile (put).
func (c *snapshots) written(id string, revs revisions, snap *Snapshot, seen epoch) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.putLocked(snap, seen)
	c.end(id, revs)
	if el, ok := c.byID[id]; ok {
		el.Value.(*cached).vouched = true
	}
}

// abandoned ends a write that failed and reports whether the watcher
// relied on it: its events may be stored, and the snapshot kept may miss
// them (Ledger.write then moves the epoch and tells the waiters).
func (c *snapshots) abandoned(id string, revs revisions) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.end(id, revs)
}

// drops is the number of drops of relied-on snapshots so far, for an
// epoch taken now.
func (c *snapshots) drops() uint64 { return c.dropped.Load() }

// drop remembers that the relied-on snapshot of id was dropped.
func (c *snapshots) drop(id string) {
	n := c.dropped.Add(1)
	c.gone[id] = n
	d := goneDrop{id: id, n: n}
	if len(c.goneOrder) < c.goneCap {
		c.goneOrder = append(c.goneOrder, d)
		return
	}
	old := c.goneOrder[c.goneNext]
	if c.gone[old.id] == old.n {
		delete(c.gone, old.id)
	}
	c.forgotten = old.n
	c.goneOrder[c.goneNext] = d
	c.goneNext = (c.goneNext + 1) % c.goneCap
}

// trusted reports whether a snapshot of id read or written at seen can be
// trusted by LoadWatched: no snapshot of id the watcher relied on was
// dropped since seen, as far as the drops remembered tell.
func (c *snapshots) trusted(id string, seen epoch) bool {
	return seen.following && seen.dropped >= c.forgotten && c.gone[id] <= seen.dropped
}

func (c *snapshots) get(id string) *Snapshot {
	snap, _ := c.getSeen(id)
	return snap
}

// getSeen is get with the watcher's epoch the snapshot was read or
// written in.
func (c *snapshots) getSeen(id string) (*Snapshot, epoch) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byID[id]
	if !ok {
		return nil, epoch{}
	}
	c.order.MoveToFront(el)
	x := el.Value.(*cached)
	return x.snap, x.seen
}

// put keeps snap unless a newer one of the same review is kept; seen is
// the watcher's epoch taken before snap was read or written.
func (c *snapshots) put(snap *Snapshot, seen epoch) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.putLocked(snap, seen)
}

func (c *snapshots) putLocked(snap *Snapshot, seen epoch) {
	id := snap.ID()
	seen.following = c.trusted(id, seen)
	if el, ok := c.byID[id]; ok {
		if x := el.Value.(*cached); x.snap.Version() <= snap.Version() {
			x.snap, x.seen = snap, seen
		}
		c.order.MoveToFront(el)
		return
	}
	c.byID[id] = c.order.PushFront(&cached{id: id, snap: snap, seen: seen})
	for c.order.Len() > c.size {
		last := c.order.Back()
		x := last.Value.(*cached)
		if x.vouched {
			c.drop(x.id)
		}
		c.order.Remove(last)
		delete(c.byID, x.id)
	}
}

// Load rebuilds a review from its stream. A review with no events is
// domain.ErrReviewNotFound. A review this ledger read or wrote recently is
// brought up to date from the last event it knew rather than rebuilt; one
// it knows in a terminal state (accepted, rejected) is answered as it is
// kept, without reading the store: no event can follow a terminal state in
// a review's history (domain.State.Terminal; Apply refuses any), so the
// kept snapshot is the review's last.
func (l *Ledger) Load(ctx context.Context, reviewID string) (*Snapshot, error) {
	seen := l.epoch()
	if prev := l.cache.get(reviewID); prev != nil {
		if prev.State().Terminal() {
			return prev, nil
		}
		snap, err := l.refresh(ctx, prev)
		if err == nil {
			l.cache.put(snap, seen)
			return snap, nil
		}
		if !errors.Is(err, errStale) {
			return nil, err
		}
	}
	h, err := l.History(ctx, reviewID)
	if err != nil {
		return nil, err
	}
	snap, err := h.Snapshot()
	if err != nil {
		return nil, err
	}
	l.cache.put(snap, seen)
	return snap, nil
}

// LoadWatched is Load for a read made after Watch by a waiter for the
// review to leave pending: the pending review it keeps is answered without
// reading the store when no change the watcher tells of can have been
// missed since it was read or written. That holds while the watcher
// follows the global order and its epoch has not moved since: it moves
// before the watcher tells of a change that the snapshot kept of its
// review does not hold (one made by another process); and a snapshot read
// before the drop of one the watcher relied on for not moving is not
// trusted. A change made later is
// told to the waiter, which then reads the review (when Follow stops, every
// waiter is told to read again, since what came after its last read is
// told to no one); one made through this ledger is kept before it is
// told. The watcher may read one of this ledger's own writes before the
// writer has kept what it leads to: it then neither moves the epoch nor
// tells, since the write keeps its snapshot before telling the waiters,
// or, failing, moves the epoch and tells them to read again (Ledger.write,
// snapshots.reflects). Anything else is Load. A waiter may thus hear of another
// process's change only once Follow has read it (its lag, about 10 ms at
// the head), where a store read would have seen it at once; the answer is
// the same. It assumes one Follow per watcher.
func (l *Ledger) LoadWatched(ctx context.Context, reviewID string) (*Snapshot, error) {
	if snap, seen := l.cache.getSeen(reviewID); snap != nil && seen.current(l.watch.epoch()) && snap.State() == domain.StatePending {
		return snap, nil
	}
	return l.Load(ctx, reviewID)
}

// errStale: a kept snapshot no longer matches the stream (its last event
// is gone or changed): the review is read again from the start.
var errStale = errors.New("kept snapshot does not match the stream")

// refresh reads the stream from prev's last event on and applies what
// follows it.
func (l *Ledger) refresh(ctx context.Context, prev *Snapshot) (*Snapshot, error) {
	recs, err := l.store.ReadStream(ctx, domain.StreamName(prev.ID()), prev.Version())
	switch {
	case errors.Is(err, eventstore.ErrStreamNotFound):
		return nil, errStale
	case err != nil:
		return nil, fmt.Errorf("read review %q: %w", prev.ID(), err)
	case len(recs) == 0 || recs[0].Revision != prev.Version():
		return nil, errStale
	}
	if meta, err := DecodeMetadata(recs[0].Metadata); err != nil || meta.Hash != prev.head {
		return nil, errStale
	}
	if len(recs) == 1 {
		return prev, nil
	}
	next := &Snapshot{Review: prev.Review.Clone(), head: prev.head, trace: prev.trace}
	for _, rec := range recs[1:] {
		e, err := domain.DecodeStored(prev.ID(), rec.Type, rec.Data)
		if err != nil {
			return nil, fmt.Errorf("review %q revision %d: %w", prev.ID(), rec.Revision, err)
		}
		m, err := DecodeMetadata(rec.Metadata)
		if err != nil {
			return nil, fmt.Errorf("review %q revision %d: metadata: %v: %w", prev.ID(), rec.Revision, err, domain.ErrCorruptHistory)
		}
		if !m.chainsOnto(next.head, rec) {
			return nil, errStale
		}
		if err := next.Apply(rec.Revision, e); err != nil {
			return nil, fmt.Errorf("review %q: %w", prev.ID(), err)
		}
		next.head = m.Hash
	}
	return next, nil
}

// epoch is the watcher's epoch with the drops of relied-on snapshots so
// far: taken before a read or a write whose snapshot is then kept.
func (l *Ledger) epoch() epoch {
	e := l.watch.epoch()
	e.dropped = l.cache.drops()
	return e
}
