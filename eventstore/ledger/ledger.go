// Package ledger stores reviews as event streams: it maps domain events onto
// an eventstore.Store, one stream per review, and chains every event to the
// one before it with a SHA-256 hash so auditors can verify that no history
// was altered, removed or reordered.
//
// Appends from concurrent callers are written together (group commit): one
// multi-stream append for many reviews, each stream checked against its own
// expected revision, each caller answered with its own result.
package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore"
)

// Ledger reads and writes review streams. It is safe for concurrent use.
type Ledger struct {
	store eventstore.Store
	group *groupCommit
	watch *Watcher
	cache *snapshots
	// policies holds the policy snapshots Submitted events name.
	policies *Policies
	// effects reports whether the committer applies work changes.
	effects bool
	// NewID returns event IDs; time-ordered UUIDs (v7) when nil, fresh for
	// every event. Tests may set it.
	NewID func() string
}

// Options tune a Ledger. The zero value is the default.
type Options struct {
	// Committer writes each group commit. Default: the store's
	// AppendMulti, which applies no work changes (Write, CreateWith and
	// CreateThen with one then fail with ErrNoEffects).
	Committer Committer
	// GroupCommit shapes the batches.
	GroupCommit GroupCommit
}

// New returns a ledger over store.
func New(store eventstore.Store, opts ...Options) *Ledger {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	effects := o.Committer != nil
	if o.Committer == nil {
		o.Committer = storeCommitter{store}
	}
	l := &Ledger{store: store, effects: effects, group: newGroupCommit(o.Committer, o.GroupCommit), watch: newWatcher(store), cache: newSnapshots(snapshotCacheSize), policies: NewPolicies(store)}
	l.watch.kept = l.cache
	return l
}

// CommitsThrough reports whether the ledger writes its group commits
// through c: whether its appends' work changes are c's to apply.
func (l *Ledger) CommitsThrough(c Committer) bool { return l.group.commit == c }

// Store returns the underlying event store.
func (l *Ledger) Store() eventstore.Store { return l.store }

// Policies returns the policy snapshots of the ledger's store.
func (l *Ledger) Policies() *Policies { return l.policies }

// putPolicies stores the policy snapshot of a Submitted among events, so it
// is durable before the Submitted that names it.
func (l *Ledger) putPolicies(ctx context.Context, events []domain.Event) error {
	for _, e := range events {
		if s, ok := e.(domain.Submitted); ok {
			if _, err := l.policies.Put(ctx, s.Policy); err != nil {
				return fmt.Errorf("append to %s: %w", domain.StreamName(s.ReviewID), err)
			}
		}
	}
	return nil
}

// Snapshot is a review as loaded from its stream, together with the hash
// of its last event, which the next append chains onto. A Snapshot does not
// change: appending returns a new one.
type Snapshot struct {
	*domain.Review
	head  string
	trace string
}

// TraceParent returns the W3C traceparent recorded with the review's
// Submitted event: the trace the review's spans belong to; "" when none
// was recorded.
func (s *Snapshot) TraceParent() string { return s.trace }

// Actor names who or what caused events: a token's name, "engine",
// "sweeper", "provider".
type Actor struct {
	Name      string
	RequestID string
	// TraceParent is the W3C traceparent of the operation appending, kept
	// in the events' metadata (not in their hash: like the request ID it
	// says where the write came from, not what the review is).
	TraceParent string
}

// ErrNoEffects: a work change was given to a ledger whose committer
// applies none (Options.Committer unset).
var ErrNoEffects = errors.New("ledger: this ledger's committer applies no effects")

// Create appends the first event of a new review. When the review already
// exists the error matches eventstore.ErrWrongExpectedVersion; the caller
// loads it and compares (domain.Review.SameSubmission).
func (l *Ledger) Create(ctx context.Context, e domain.Submitted, actor Actor) (*Snapshot, error) {
	return l.append(ctx, &Snapshot{Review: &domain.Review{}}, eventstore.NoStream, actor, nil, e)
}

// CreateWith is Create with the change to the review's work record (see
// Committer), applied if and only if the review is created.
func (l *Ledger) CreateWith(ctx context.Context, e domain.Submitted, actor Actor, change WorkChange) (*Snapshot, error) {
	return l.append(ctx, &Snapshot{Review: &domain.Review{}}, eventstore.NoStream, actor, &change, e)
}

// CreateThen creates a review as CreateWith does and appends then, the
// events by, in the same write: for a review whose next step is known at
// its creation (its first attempt, started by the process that owns it
// from the start), one commit instead of two. It returns the review as
// its Submitted event left it (what its submitter is answered) and as the
// whole write left it (what its owner goes on from).
func (l *Ledger) CreateThen(ctx context.Context, e domain.Submitted, actor Actor, change WorkChange, by Actor, then ...domain.Event) (created, current *Snapshot, err error) {
	if !l.effects {
		return nil, nil, ErrNoEffects
	}
	if err := l.putPolicies(ctx, []domain.Event{e}); err != nil {
		return nil, nil, err
	}
	stream := domain.StreamName(e.ReviewID)
	created, data, err := l.encode(&Snapshot{Review: &domain.Review{}}, e.ReviewID, actor, []domain.Event{e})
	if err != nil {
		return nil, nil, err
	}
	current, more, err := l.encode(created, e.ReviewID, by, then)
	if err != nil {
		return nil, nil, err
	}
	events := append([]domain.Event{e}, then...)
	if err := l.write(ctx, stream, eventstore.NoStream, append(data, more...), &change, e.ReviewID, current, events); err != nil {
		return nil, nil, err
	}
	return created, current, nil
}

// Append appends events to a loaded review, expecting the stream to be
// exactly at snap's version: if anything was appended since snap was
// loaded the error matches eventstore.ErrWrongExpectedVersion and nothing is
// written. This is how a late finding fails instead of overwriting a newer
// state.
func (l *Ledger) Append(ctx context.Context, snap *Snapshot, actor Actor, events ...domain.Event) (*Snapshot, error) {
	return l.appendTo(ctx, snap, actor, nil, events...)
}

func (l *Ledger) appendTo(ctx context.Context, snap *Snapshot, actor Actor, change *WorkChange, events ...domain.Event) (*Snapshot, error) {
	if !snap.Exists() {
		return nil, fmt.Errorf("append to review %q: %w", snap.ID(), domain.ErrReviewNotFound)
	}
	return l.append(ctx, snap, eventstore.Exact(snap.Version()), actor, change, events...)
}

func (l *Ledger) append(ctx context.Context, snap *Snapshot, expected eventstore.ExpectedRevision, actor Actor, change *WorkChange, events ...domain.Event) (*Snapshot, error) {
	if len(events) == 0 {
		return snap, nil
	}
	if change != nil && !l.effects {
		return nil, ErrNoEffects
	}
	id := reviewIDOf(events[0], snap)
	stream := domain.StreamName(id)
	if err := l.putPolicies(ctx, events); err != nil {
		return nil, err
	}
	next, data, err := l.encode(snap, id, actor, events)
	if err != nil {
		return nil, err
	}
	if err := l.write(ctx, stream, expected, data, change, id, next, events); err != nil {
		return nil, err
	}
	return next, nil
}

// write appends the encoded events of one review through the group
// commit, then keeps the snapshot they lead to and tells the review's
// waiters when the events may have ended its automated path.
func (l *Ledger) write(ctx context.Context, stream string, expected eventstore.ExpectedRevision, data []eventstore.EventData, change *WorkChange, id string, next *Snapshot, events []domain.Event) error {
	seen := l.epoch()
	revs := revisions{first: next.Version() + 1 - uint64(len(data)), last: next.Version()}
	l.cache.begin(id, revs)
	if _, err := l.group.append(ctx, eventstore.StreamAppend{Stream: stream, Expected: expected, Events: data}, change); err != nil {
		if l.cache.abandoned(id, revs) {
			// The watcher read events of this write, which may be stored,
			// and relied on it to keep them: the snapshot kept may miss
			// them, so the epoch moves before the waiters are told.
			l.watch.told.Add(1)
			l.watch.changed(id, nil)
		}
		return fmt.Errorf("append to %s: %w", stream, unsure(err, id, revs.first, data))
	}
	l.cache.written(id, revs, next, seen) // before the waiters are told: see LoadWatched
	for _, e := range events {
		if mayEndPending(e.EventType()) {
			l.watch.changed(id, next)
			break
		}
	}
	return nil
}

// encode chains events of review id onto snap and returns the snapshot
// they lead to. Their bodies are stored compact where the domain can
// (domain.EncodeStored).
func (l *Ledger) encode(snap *Snapshot, id string, actor Actor, events []domain.Event) (*Snapshot, []eventstore.EventData, error) {
	stream := domain.StreamName(id)
	next := &Snapshot{Review: snap.Review.Clone(), head: snap.head, trace: snap.trace}
	rev := uint64(0)
	if snap.Exists() {
		rev = snap.Version() + 1
	} else {
		next.trace = actor.TraceParent
	}
	data := make([]eventstore.EventData, len(events))
	for i, e := range events {
		body, err := domain.EncodeStored(id, stored(e))
		if err != nil {
			return nil, nil, err
		}
		meta := Metadata{Schema: domain.SchemaVersion, Actor: actor.Name, RequestID: actor.RequestID, TraceParent: actor.TraceParent, PrevHash: next.head}
		meta.Hash = chainHash(meta.PrevHash, stream, rev, e.EventType(), body, actor.Name)
		mb, err := meta.Encode()
		if err != nil {
			return nil, nil, fmt.Errorf("encode metadata: %w", err)
		}
		if err := next.Apply(rev, e); err != nil {
			return nil, nil, fmt.Errorf("append to %s: %w", stream, err)
		}
		data[i] = eventstore.EventData{ID: l.newID(), Type: e.EventType(), Data: body, Metadata: mb}
		next.head = meta.Hash
		rev++
	}
	return next, data, nil
}

func reviewIDOf(first domain.Event, snap *Snapshot) string {
	if s, ok := first.(domain.Submitted); ok {
		return s.ReviewID
	}
	return snap.ID()
}

func (l *Ledger) newID() string {
	if l.NewID != nil {
		return l.NewID()
	}
	return uuid.Must(uuid.NewV7()).String()
}

// History is a review's stream as stored, for replay and audit.
type History struct {
	ReviewID string
	Events   []Entry
}

// Entry is one stored event, decoded.
type Entry struct {
	Revision   uint64
	Type       string
	RecordedAt time.Time
	Event      domain.Event
	// Data is the body as stored: canonical (an object) or compact (an
	// array, domain.EncodeStored); Body gives it canonical.
	Data     json.RawMessage
	Metadata Metadata
}

// Body returns the entry's body in the canonical form: as stored when it
// was stored so, and otherwise the canonical body of its event as stored
// (a Submitted names its policy by digest).
func (e Entry) Body() (json.RawMessage, error) {
	if !domain.IsCompact(e.Data) {
		return e.Data, nil
	}
	return domain.EncodeEvent(stored(e.Event))
}

// History reads a review's whole stream. A review with no events is
// domain.ErrReviewNotFound.
func (l *Ledger) History(ctx context.Context, reviewID string) (*History, error) {
	if err := domain.ValidateReviewID(reviewID); err != nil {
		return nil, err
	}
	recs, err := l.store.ReadStream(ctx, domain.StreamName(reviewID), 0)
	if errors.Is(err, eventstore.ErrStreamNotFound) {
		return nil, fmt.Errorf("review %q: %w", reviewID, domain.ErrReviewNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read review %q: %w", reviewID, err)
	}
	return l.history(ctx, reviewID, recs)
}

// StreamsReader reads many streams at once: every backend does
// (ReadStreams), and Histories uses it when the store has it.
type StreamsReader interface {
	// ReadStreams returns the events of every stream of names that
	// exists, each in revision order; a stream that does not exist is not
	// in the map.
	ReadStreams(ctx context.Context, names []string) (map[string][]eventstore.RecordedEvent, error)
}

// Histories reads the histories of reviewIDs and calls each with the index
// of each and what History would have returned for it, in the order of
// reviewIDs; an error of each stops it. The streams are read in one read
// of the store when it is a StreamsReader (an auditor's check of every
// review costs a round trip per batch, not per review), one by one
// otherwise. An invalid review ID is refused before anything is read.
func (l *Ledger) Histories(ctx context.Context, reviewIDs []string, each func(i int, h *History, err error) error) error {
	names := make([]string, len(reviewIDs))
	for i, id := range reviewIDs {
		if err := domain.ValidateReviewID(id); err != nil {
			return err
		}
		names[i] = domain.StreamName(id)
	}
	r, ok := l.store.(StreamsReader)
	if !ok {
		for i, id := range reviewIDs {
			h, err := l.History(ctx, id)
			if err := each(i, h, err); err != nil {
				return err
			}
		}
		return nil
	}
	streams, err := r.ReadStreams(ctx, names)
	if err != nil {
		return fmt.Errorf("read %d reviews: %w", len(reviewIDs), err)
	}
	for i, id := range reviewIDs {
		var h *History
		recs, found := streams[names[i]]
		if found {
			h, err = l.history(ctx, id, recs)
		} else {
			err = fmt.Errorf("review %q: %w", id, domain.ErrReviewNotFound)
		}
		if err := each(i, h, err); err != nil {
			return err
		}
	}
	return nil
}

// history decodes the stored events of a review's stream.
func (l *Ledger) history(ctx context.Context, reviewID string, recs []eventstore.RecordedEvent) (*History, error) {
	var err error
	h := &History{ReviewID: reviewID, Events: make([]Entry, len(recs))}
	prev := ""
	for i, rec := range recs {
		if h.Events[i], err = l.entry(ctx, reviewID, rec, prev); err != nil {
			return nil, fmt.Errorf("review %q revision %d: %w", reviewID, rec.Revision, err)
		}
		prev = h.Events[i].Metadata.Hash
	}
	return h, nil
}

// entry decodes one stored event of review id whose stream's event before
// has the hash prev: its body (with the policy a Submitted names resolved)
// and its metadata of any schema.
func (l *Ledger) entry(ctx context.Context, id string, rec eventstore.RecordedEvent, prev string) (Entry, error) {
	e, err := l.policies.Decode(ctx, id, rec.Type, rec.Data)
	if err != nil {
		return Entry{}, err
	}
	meta, err := DecodeMetadata(rec.Metadata)
	if err != nil {
		return Entry{}, fmt.Errorf("metadata: %v: %w", err, domain.ErrCorruptHistory)
	}
	if !meta.storesPrev() {
		meta.PrevHash = prev
	}
	return Entry{Revision: rec.Revision, Type: rec.Type, RecordedAt: rec.RecordedAt, Event: e, Data: rec.Data, Metadata: meta}, nil
}

// Snapshot rebuilds the review from the history.
func (h *History) Snapshot() (*Snapshot, error) {
	rv := &Snapshot{Review: &domain.Review{}}
	for _, e := range h.Events {
		if err := rv.Apply(e.Revision, e.Event); err != nil {
			return nil, fmt.Errorf("review %q: %w", h.ReviewID, err)
		}
		rv.head = e.Metadata.Hash
		if e.Revision == 0 {
			rv.trace = e.Metadata.TraceParent
		}
	}
	return rv, nil
}
