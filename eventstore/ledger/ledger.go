// Package ledger stores reviews as event streams: it maps domain events onto
// an eventstore.Store, one stream per review, and chains every event to the
// one before it with a SHA-256 hash so auditors can verify that no history
// was altered, removed or reordered.
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

// Ledger reads and writes review streams.
type Ledger struct {
	store eventstore.Store
	// NewID returns event IDs; time-ordered UUIDs (v7) when nil, which keep
	// the event ID index cheap to insert into. Tests may set it.
	NewID func() string
}

// New returns a ledger over store.
func New(store eventstore.Store) *Ledger { return &Ledger{store: store} }

// Store returns the underlying event store.
func (l *Ledger) Store() eventstore.Store { return l.store }

// Review is a review as loaded from its stream, together with the hash of
// its last event, which the next append chains onto. A Review is a snapshot:
// appending returns a new one and leaves it unchanged.
type Review struct {
	*domain.Review
	head string
}

// Actor names who or what caused events: a token's name, "runner",
// "sweeper", "provider".
type Actor struct {
	Name      string
	RequestID string
}

// Metadata is stored with every event.
type Metadata struct {
	Schema    int    `json:"schema"`
	Actor     string `json:"actor,omitempty"`
	RequestID string `json:"request_id,omitempty"`
	PrevHash  string `json:"prev_hash"`
	Hash      string `json:"hash"`
}

// Load rebuilds a review from its stream. A review with no events is
// domain.ErrReviewNotFound.
func (l *Ledger) Load(ctx context.Context, reviewID string) (*Review, error) {
	h, err := l.History(ctx, reviewID)
	if err != nil {
		return nil, err
	}
	return h.Review()
}

// Create appends the first event of a new review. When the review already
// exists the error matches eventstore.ErrWrongExpectedVersion; the caller
// loads it and compares (domain.Review.SameSubmission).
func (l *Ledger) Create(ctx context.Context, e domain.Submitted, actor Actor) (*Review, error) {
	return l.append(ctx, &Review{Review: &domain.Review{}}, eventstore.NoStream, actor, e)
}

// Append appends events to a loaded review, expecting the stream to be
// exactly at rv's version: if anything was appended since rv was loaded the
// error matches eventstore.ErrWrongExpectedVersion and nothing is written.
// This is how a late finding fails instead of overwriting a newer state.
func (l *Ledger) Append(ctx context.Context, rv *Review, actor Actor, events ...domain.Event) (*Review, error) {
	if !rv.Exists() {
		return nil, fmt.Errorf("append to review %q: %w", rv.ID(), domain.ErrReviewNotFound)
	}
	return l.append(ctx, rv, eventstore.Exact(rv.Version()), actor, events...)
}

func (l *Ledger) append(ctx context.Context, rv *Review, expected eventstore.ExpectedRevision, actor Actor, events ...domain.Event) (*Review, error) {
	if len(events) == 0 {
		return rv, nil
	}
	next := &Review{Review: rv.Review.Clone(), head: rv.head}
	rev := uint64(0)
	if rv.Exists() {
		rev = rv.Version() + 1
	}
	id := reviewIDOf(events[0], rv)
	stream := domain.StreamName(id)
	data := make([]eventstore.EventData, len(events))
	for i, e := range events {
		body, err := domain.EncodeEvent(e)
		if err != nil {
			return nil, err
		}
		meta := Metadata{Schema: domain.SchemaVersion, Actor: actor.Name, RequestID: actor.RequestID, PrevHash: next.head}
		meta.Hash = chainHash(meta.PrevHash, stream, rev, e.EventType(), body, actor.Name)
		mb, err := json.Marshal(meta)
		if err != nil {
			return nil, fmt.Errorf("encode metadata: %w", err)
		}
		if err := next.Apply(rev, e); err != nil {
			return nil, fmt.Errorf("append to %s: %w", stream, err)
		}
		data[i] = eventstore.EventData{ID: l.newID(), Type: e.EventType(), Data: body, Metadata: mb}
		next.head = meta.Hash
		rev++
	}
	if _, err := l.store.Append(ctx, stream, expected, data...); err != nil {
		return nil, fmt.Errorf("append to %s: %w", stream, err)
	}
	return next, nil
}

func reviewIDOf(first domain.Event, rv *Review) string {
	if s, ok := first.(domain.Submitted); ok {
		return s.ReviewID
	}
	return rv.ID()
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
	Data       json.RawMessage
	Metadata   Metadata
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
	h := &History{ReviewID: reviewID, Events: make([]Entry, len(recs))}
	for i, rec := range recs {
		e, err := domain.DecodeEvent(rec.Type, rec.Data)
		if err != nil {
			return nil, fmt.Errorf("review %q revision %d: %w", reviewID, rec.Revision, err)
		}
		var meta Metadata
		if err := json.Unmarshal(rec.Metadata, &meta); err != nil {
			return nil, fmt.Errorf("review %q revision %d: metadata: %v: %w", reviewID, rec.Revision, err, domain.ErrCorruptHistory)
		}
		h.Events[i] = Entry{Revision: rec.Revision, Type: rec.Type, RecordedAt: rec.RecordedAt, Event: e, Data: rec.Data, Metadata: meta}
	}
	return h, nil
}

// Review rebuilds the review from the history.
func (h *History) Review() (*Review, error) {
	rv := &Review{Review: &domain.Review{}}
	for _, e := range h.Events {
		if err := rv.Apply(e.Revision, e.Event); err != nil {
			return nil, fmt.Errorf("review %q: %w", h.ReviewID, err)
		}
		rv.head = e.Metadata.Hash
	}
	return rv, nil
}
