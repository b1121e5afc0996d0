// Package queuefeed turns the ledger's global order into a stream of
// manual-queue changes (an item added, claimed, released, voted on,
// decided, requeued, held, taken off hold), for GET
// /v1/manual-queue/events. One Feed per process follows the global order
// while at least one stream is open (and a short linger after the last
// closes), and reads nothing from the ledger otherwise; every stream reads
// from its bounded buffer, and a stream that falls behind the buffer reads
// the ledger itself, a page at a time. Because it is driven by the ledger,
// a change made by any process sharing the database is seen.
package queuefeed

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/clock"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/projections"
)

// Change types: the SSE event names.
const (
	Added    = "added"
	Claimed  = "claimed"
	Released = "released"
	Approved = "approved"
	Decided  = "decided"
	Requeued = "requeued"
	Held     = "held"
	Unheld   = "unheld"
)

// Change is one manual-queue change, the data of an SSE event. Fields that
// do not apply to its type are left out.
type Change struct {
	// Position is the ledger event's place in the global order (the SSE
	// id).
	Position eventstore.Position `json:"-"`

	Type     string    `json:"type"`
	ReviewID string    `json:"review_id"`
	Version  uint64    `json:"version"`
	At       time.Time `json:"at"`
	Actor    string    `json:"actor"`

	Item           *projections.QueueItem `json:"item,omitempty"`
	ClaimedBy      string                 `json:"claimed_by,omitempty"`
	ClaimExpiresAt *time.Time             `json:"claim_expires_at,omitempty"`
	ReleasedBy     string                 `json:"released_by,omitempty"`
	Reason         string                 `json:"reason,omitempty"`
	Moderator      string                 `json:"moderator,omitempty"`
	State          string                 `json:"state,omitempty"`
	By             string                 `json:"by,omitempty"`
	Round          int                    `json:"round,omitempty"`
	Deadline       *time.Time             `json:"deadline,omitempty"`
	Note           string                 `json:"note,omitempty"`
	HeldBy         string                 `json:"held_by,omitempty"`
}

// FormatID is a position as an SSE event ID.
func FormatID(p eventstore.Position) string {
	return strconv.FormatUint(p.Commit, 10) + "-" + strconv.FormatUint(p.Prepare, 10)
}

// ErrBadID: a Last-Event-ID that is not one the stream sent.
var ErrBadID = errors.New("not an event ID of this stream")

// ParseID reads an SSE event ID back into a position.
func ParseID(id string) (eventstore.Position, error) {
	c, p, ok := strings.Cut(id, "-")
	commit, err1 := strconv.ParseUint(c, 10, 64)
	prepare, err2 := strconv.ParseUint(p, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return eventstore.Position{}, fmt.Errorf("%q: %w", id, ErrBadID)
	}
	return eventstore.Position{Commit: commit, Prepare: prepare}, nil
}

// Histories reads a review's stored events (*ledger.Ledger).
type Histories interface {
	History(ctx context.Context, reviewID string) (*ledger.History, error)
}

// headReader is a store that can say where its global order ends now.
type headReader interface {
	Head(ctx context.Context) (eventstore.Position, error)
}

// Config sizes a Feed.
type Config struct {
	// Buffer is how many changes are kept for the streams (4096 when 0).
	Buffer int
	// Page is how many ledger events one read takes (500 when 0).
	Page int
	// Retry is the wait after a failed read (1 s when 0).
	Retry time.Duration
	// Now is the clock of the items of added changes (time.Now when nil).
	Now func() time.Time
	// Linger is how long the feed goes on following the ledger after the
	// last stream closed, so reconnecting clients find it live (5 s when
	// 0).
	Linger time.Duration
}

// Feed follows the ledger's global order and keeps its latest queue
// changes. It is safe for concurrent use.
type Feed struct {
	// Skipped counts the events left out because they cannot be read
	// (a damaged history); audit verify names their reviews.
	Skipped atomic.Int64

	store eventstore.Store
	hist  Histories
	cfg   Config

	mu      sync.Mutex
	started bool
	cannot  error               // set when the feed can never follow (ErrNoHead)
	floor   eventstore.Position // changes after it are all in buf
	head    eventstore.Position // the global order is read up to it
	buf     []Change
	wake    chan struct{} // closed when head moves
	streams int           // open streams (Open)
	demand  chan struct{} // closed when streams changes
}

// New returns a feed reading store (the ledger's) and hist.
func New(store eventstore.Store, hist Histories, cfg Config) *Feed {
	if cfg.Buffer <= 0 {
		cfg.Buffer = 4096
	}
	if cfg.Page <= 0 {
		cfg.Page = 500
	}
	if cfg.Retry <= 0 {
		cfg.Retry = time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Linger <= 0 {
		cfg.Linger = 5 * time.Second
	}
	return &Feed{store: store, hist: hist, cfg: cfg, wake: make(chan struct{}), demand: make(chan struct{})}
}

// Open says a stream is open, until the returned func is called: the feed
// follows the ledger only while a stream is open. Call it before Head and
// Next.
func (f *Feed) Open() (closeStream func()) {
	f.mu.Lock()
	f.streams++
	f.signal()
	f.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			f.streams--
			f.signal()
			f.mu.Unlock()
		})
	}
}

// signal wakes Follow when the open streams change; f.mu is held.
func (f *Feed) signal() {
	close(f.demand)
	f.demand = make(chan struct{})
}

// ErrNoHead: the store cannot say where its global order ends.
var ErrNoHead = errors.New("the event store cannot tell the head of its global order")

// Follow reads the global order until ctx is done (then it returns nil),
// while a stream is open (Open) and for Config.Linger after the last one
// closed. Each time it starts again it starts from the head of the global
// order then, with an empty buffer. Failed reads are tried again after
// Config.Retry.
func (f *Feed) Follow(ctx context.Context) error {
	hr, ok := f.store.(headReader)
	if !ok {
		f.mu.Lock()
		f.cannot = ErrNoHead
		f.advance()
		f.mu.Unlock()
		return ErrNoHead
	}
	for f.awaitStream(ctx) {
		f.session(ctx, hr)
	}
	return nil
}

// awaitStream waits until a stream is open; false once ctx is done.
func (f *Feed) awaitStream(ctx context.Context) bool {
	for ctx.Err() == nil {
		f.mu.Lock()
		n, demand := f.streams, f.demand
		f.mu.Unlock()
		if n > 0 {
			return true
		}
		select {
		case <-demand:
		case <-ctx.Done():
		}
	}
	return false
}

// session follows the global order from its head now on until ctx is done
// or no stream has been open for Config.Linger.
func (f *Feed) session(ctx context.Context, hr headReader) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go f.idle(ctx, cancel)
	pos, ok := f.takeHead(ctx, hr)
	if !ok {
		return
	}
	f.mu.Lock()
	f.started, f.floor, f.head, f.buf = true, pos, pos, nil
	f.advance()
	f.mu.Unlock()
	f.read(ctx, pos)
}

// takeHead reads the head of the global order, trying again after
// Config.Retry; false once ctx is done.
func (f *Feed) takeHead(ctx context.Context, hr headReader) (eventstore.Position, bool) {
	for {
		if pos, err := hr.Head(ctx); err == nil {
			return pos, true
		}
		if clock.Sleep(ctx, f.cfg.Retry) != nil {
			return eventstore.Position{}, false
		}
	}
}

// idle ends the session (pause) once no stream has been open for
// Config.Linger, and stops Head answering until the next session has
// taken its head.
func (f *Feed) idle(ctx context.Context, pause context.CancelFunc) {
	for {
		f.mu.Lock()
		n, demand := f.streams, f.demand
		f.mu.Unlock()
		var linger <-chan time.Time
		if n == 0 {
			linger = time.After(f.cfg.Linger)
		}
		select {
		case <-demand:
			continue
		case <-ctx.Done():
			return
		case <-linger:
		}
		f.mu.Lock()
		stop := f.streams == 0
		if stop {
			f.started, f.buf = false, nil
			pause() // under f.mu: nothing more is published
		}
		f.mu.Unlock()
		if stop {
			return
		}
	}
}

// read follows the global order after pos until ctx is done.
func (f *Feed) read(ctx context.Context, pos eventstore.Position) {
	for ctx.Err() == nil {
		recs, err := f.store.ReadAll(ctx, pos, f.cfg.Page)
		if err == nil && len(recs) == 0 {
			if err = f.store.WaitForEvents(ctx, pos); err == nil {
				continue
			}
		}
		var changes []Change
		if err == nil {
			changes, err = f.convert(ctx, recs)
		}
		if err != nil {
			if ctx.Err() != nil || clock.Sleep(ctx, f.cfg.Retry) != nil {
				return
			}
			continue
		}
		pos = recs[len(recs)-1].Position
		f.publish(ctx, changes, pos)
	}
}

// publish adds changes read up to pos and wakes the streams, unless the
// session has ended (ctx is done).
func (f *Feed) publish(ctx context.Context, changes []Change, pos eventstore.Position) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ctx.Err() != nil {
		return
	}
	f.buf = append(f.buf, changes...)
	if over := len(f.buf) - f.cfg.Buffer; over > 0 {
		f.floor = f.buf[over-1].Position
		f.buf = append([]Change(nil), f.buf[over:]...)
	}
	f.head = pos
	f.advance()
}

func (f *Feed) advance() {
	close(f.wake)
	f.wake = make(chan struct{})
}

// Head waits until the feed follows the ledger (a stream is open) and
// returns where it has read to: where a stream without Last-Event-ID
// starts.
func (f *Feed) Head(ctx context.Context) (eventstore.Position, error) {
	for {
		f.mu.Lock()
		started, head, wake, cannot := f.started, f.head, f.wake, f.cannot
		f.mu.Unlock()
		if cannot != nil {
			return eventstore.Position{}, cannot
		}
		if started {
			return head, nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return eventstore.Position{}, ctx.Err()
		}
	}
}

// Next returns at most max changes after pos, the position to ask from
// next, and a channel closed once more may be there. A stream asking from
// before the buffer reads the ledger itself, a page at a time.
func (f *Feed) Next(ctx context.Context, after eventstore.Position, max int) ([]Change, eventstore.Position, <-chan struct{}, error) {
	f.mu.Lock()
	if f.cannot != nil {
		defer f.mu.Unlock()
		return nil, after, nil, f.cannot
	}
	if !f.started || f.head.Less(after) || f.head == after {
		wake := f.wake
		f.mu.Unlock()
		return nil, after, wake, nil
	}
	if after.Less(f.floor) {
		f.mu.Unlock()
		return f.catchUp(ctx, after, max)
	}
	var out []Change
	next := f.head
	for _, c := range f.buf {
		if !after.Less(c.Position) {
			continue
		}
		if len(out) == max {
			next = out[len(out)-1].Position
			break
		}
		out = append(out, c)
	}
	wake := f.wake
	f.mu.Unlock()
	return out, next, wake, nil
}

// catchUp reads one page of the ledger after pos.
func (f *Feed) catchUp(ctx context.Context, after eventstore.Position, max int) ([]Change, eventstore.Position, <-chan struct{}, error) {
	recs, err := f.store.ReadAll(ctx, after, min(max, f.cfg.Page))
	if err != nil {
		return nil, after, nil, err
	}
	changes, err := f.convert(ctx, recs)
	if err != nil {
		return nil, after, nil, err
	}
	if len(recs) == 0 {
		// Nothing between a position that was never the ledger's and the
		// buffer: go on from the buffer.
		f.mu.Lock()
		floor, wake := f.floor, f.wake
		f.mu.Unlock()
		return nil, floor, wake, nil
	}
	next := recs[len(recs)-1].Position
	closed := make(chan struct{})
	close(closed) // read on at once
	return changes, next, closed, nil
}

// convert turns ledger events into queue changes.
func (f *Feed) convert(ctx context.Context, recs []eventstore.RecordedEvent) ([]Change, error) {
	var out []Change
	for _, r := range recs {
		id, ok := strings.CutPrefix(r.Stream, domain.StreamName(""))
		if !ok || !queueType(r.Type) {
			continue
		}
		e, err := domain.DecodeStored(id, r.Type, r.Data)
		if err != nil {
			// An event no stream can show (audit verify names its review)
			// must not stop every stream behind it.
			f.Skipped.Add(1)
			continue
		}
		meta, _ := ledger.DecodeMetadata(r.Metadata) // the actor is informative
		c := Change{Position: r.Position, ReviewID: id, Version: r.Revision, At: r.RecordedAt.UTC(), Actor: meta.Actor}
		if !describe(&c, e) {
			continue
		}
		if c.Type == Added {
			item, err := f.item(ctx, id, r.Revision)
			if errors.Is(err, domain.ErrCorruptHistory) {
				f.Skipped.Add(1) // likewise: a damaged history is not shown
				continue
			}
			if err != nil {
				return nil, err
			}
			c.Item = item
		}
		out = append(out, c)
	}
	return out, nil
}

func queueType(t string) bool {
	switch t {
	case domain.TypeEscalated, domain.TypeClaimed, domain.TypeClaimReleased, domain.TypeManualApprovalRecorded,
		domain.TypeManualDecisionRecorded, domain.TypeRequeued, domain.TypeHeld, domain.TypeUnheld:
		return true
	}
	return false
}

// describe fills c from e and reports whether e is a queue change.
func describe(c *Change, e domain.Event) bool {
	switch d := e.(type) {
	case domain.Escalated:
		if d.State != domain.StateManualReview {
			return false // failed closed: never queued
		}
		c.Type, c.At, c.Reason = Added, d.At.UTC(), string(d.Reason)
	case domain.Claimed:
		until := d.ExpiresAt.UTC()
		c.Type, c.At, c.ClaimedBy, c.ClaimExpiresAt = Claimed, d.ClaimedAt.UTC(), d.Moderator, &until
	case domain.ClaimReleased:
		c.Type, c.At, c.ClaimedBy, c.ReleasedBy, c.Reason = Released, d.At.UTC(), d.Moderator, d.By, string(d.Reason)
	case domain.ManualApprovalRecorded:
		c.Type, c.At, c.Moderator, c.State = Approved, d.At.UTC(), d.Moderator, string(d.State)
	case domain.ManualDecisionRecorded:
		c.Type, c.At, c.Moderator, c.State = Decided, d.At.UTC(), d.Moderator, string(d.State)
	case domain.Requeued:
		deadline := d.Deadline.UTC()
		c.Type, c.At, c.By, c.Round, c.Deadline, c.Note = Requeued, d.At.UTC(), d.By, d.Round, &deadline, d.Note
	case domain.Held:
		c.Type, c.At, c.HeldBy, c.Note = Held, d.At.UTC(), d.By, d.Note
	case domain.Unheld:
		c.Type, c.At, c.By = Unheld, d.At.UTC(), d.By
	default:
		return false
	}
	return true
}

// item is the queue item of a review as it stood at revision rev (when it
// entered the queue).
func (f *Feed) item(ctx context.Context, id string, rev uint64) (*projections.QueueItem, error) {
	h, err := f.hist.History(ctx, id)
	if err != nil {
		return nil, err
	}
	r := &domain.Review{}
	for _, e := range h.Events {
		if e.Revision > rev {
			break
		}
		if err := r.Apply(e.Revision, e.Event); err != nil {
			return nil, err
		}
	}
	it := projections.ItemOf(r, f.cfg.Now())
	return &it, nil
}
