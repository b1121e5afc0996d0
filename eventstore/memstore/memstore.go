// Package memstore is an in-memory eventstore.Store for tests of the code
// above the store. It keeps everything in one process and loses it on exit.
package memstore

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/reviewledger/reviewledger/eventstore"
)

var _ eventstore.Store = (*Store)(nil)

// Store is an in-memory event store. The zero value is not usable; call New.
type Store struct {
	// Now stamps RecordedAt; time.Now when nil.
	Now func() time.Time

	mu      sync.Mutex
	streams map[string][]eventstore.RecordedEvent
	all     []eventstore.RecordedEvent
	ids     map[idKey]eventstore.RecordedEvent // an ID is unique within its stream
	changed chan struct{}                      // closed and replaced on every append
}

// New returns an empty store.
func New() *Store {
	return &Store{
		streams: make(map[string][]eventstore.RecordedEvent),
		ids:     make(map[idKey]eventstore.RecordedEvent),
		changed: make(chan struct{}),
	}
}

func (s *Store) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Append implements eventstore.Store.
func (s *Store) Append(ctx context.Context, stream string, expected eventstore.ExpectedRevision, events ...eventstore.EventData) (eventstore.AppendResult, error) {
	if err := ctx.Err(); err != nil {
		return eventstore.AppendResult{}, err
	}
	if err := validate(stream, events); err != nil {
		return eventstore.AppendResult{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	res, written, err := s.appendLocked(stream, expected, events)
	if written {
		s.announce()
	}
	return res, err
}

// AppendMulti implements eventstore.Store. The whole call is made under the
// store's lock, so readers see all of its streams' events or none.
func (s *Store) AppendMulti(ctx context.Context, appends ...eventstore.StreamAppend) ([]eventstore.StreamResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := eventstore.ValidateAppendMulti(appends); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	results := make([]eventstore.StreamResult, len(appends))
	wrote := false
	for i, a := range appends {
		res, written, err := s.appendLocked(a.Stream, a.Expected, a.Events)
		results[i] = eventstore.StreamResult{AppendResult: res, Err: err}
		wrote = wrote || written
	}
	if wrote {
		s.announce()
	}
	return results, nil
}

// appendLocked is Append with s.mu held and the arguments valid. It reports
// whether it wrote anything.
func (s *Store) appendLocked(stream string, expected eventstore.ExpectedRevision, events []eventstore.EventData) (eventstore.AppendResult, bool, error) {
	cur := s.streams[stream]
	if res, ok, err := s.idempotent(stream, expected, cur, events); ok || err != nil {
		return res, false, err
	}
	exists := len(cur) > 0
	var current uint64
	if exists {
		current = cur[len(cur)-1].Revision
	}
	if !expected.Satisfied(exists, current) {
		return eventstore.AppendResult{}, false, &eventstore.WrongExpectedVersionError{Stream: stream, Expected: expected, Exists: exists, Actual: current}
	}
	next := uint64(len(cur))
	now := s.now()
	var last eventstore.RecordedEvent
	for i, e := range events {
		seq := uint64(len(s.all) + 1)
		last = eventstore.RecordedEvent{
			ID:         e.ID,
			Stream:     stream,
			Revision:   next + uint64(i),
			Position:   eventstore.Position{Commit: seq, Prepare: seq},
			Type:       e.Type,
			Data:       bytes.Clone(e.Data),
			Metadata:   bytes.Clone(e.Metadata),
			RecordedAt: now,
		}
		s.streams[stream] = append(s.streams[stream], last)
		s.all = append(s.all, last)
		s.ids[idKey{stream, e.ID}] = last
	}
	return eventstore.AppendResult{NextRevision: last.Revision, Position: last.Position}, true, nil
}

// announce wakes the waiters; s.mu must be held.
func (s *Store) announce() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// idempotent reports whether events were already appended at the place
// expected gives them. It returns an error when an ID is reused for anything
// else.
func (s *Store) idempotent(stream string, expected eventstore.ExpectedRevision, cur []eventstore.RecordedEvent, events []eventstore.EventData) (eventstore.AppendResult, bool, error) {
	first, seen := s.ids[idKey{stream, events[0].ID}]
	if !seen {
		for _, e := range events[1:] {
			if _, dup := s.ids[idKey{stream, e.ID}]; dup {
				return eventstore.AppendResult{}, false, fmt.Errorf("append to %s: event %s: %w", stream, e.ID, eventstore.ErrDuplicateEventID)
			}
		}
		return eventstore.AppendResult{}, false, nil
	}
	start, placeOK := first.Revision, true
	if rev, ok := expected.Exact(); ok {
		placeOK = start == rev+1
	} else if expected.IsNoStream() {
		placeOK = start == 0
	}
	for i, e := range events {
		r := start + uint64(i)
		if !placeOK || r >= uint64(len(cur)) || !same(cur[r], e) {
			return eventstore.AppendResult{}, false, fmt.Errorf("append to %s: event %s: %w", stream, e.ID, eventstore.ErrDuplicateEventID)
		}
	}
	last := cur[start+uint64(len(events))-1]
	return eventstore.AppendResult{NextRevision: last.Revision, Position: last.Position}, true, nil
}

// idKey is an event ID within its stream.
type idKey struct{ stream, id string }

func same(r eventstore.RecordedEvent, e eventstore.EventData) bool {
	return r.ID == e.ID && r.Type == e.Type && bytes.Equal(r.Data, e.Data) && bytes.Equal(r.Metadata, e.Metadata)
}

func validate(stream string, events []eventstore.EventData) error {
	return eventstore.ValidateAppend(stream, events)
}

// ReadStream implements eventstore.Store.
func (s *Store) ReadStream(ctx context.Context, stream string, from uint64) ([]eventstore.RecordedEvent, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.streams[stream]
	if len(cur) == 0 {
		return nil, fmt.Errorf("read %s: %w", stream, eventstore.ErrStreamNotFound)
	}
	if from >= uint64(len(cur)) {
		return nil, nil
	}
	return clone(cur[from:]), nil
}

// ReadStreams returns the events of every stream of names that exists,
// each in revision order, as ReadStream does one by one.
func (s *Store) ReadStreams(ctx context.Context, names []string) (map[string][]eventstore.RecordedEvent, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]eventstore.RecordedEvent, len(names))
	for _, name := range names {
		if cur := s.streams[name]; len(cur) > 0 {
			out[name] = clone(cur)
		}
	}
	return out, nil
}

// ReadAll implements eventstore.Store.
func (s *Store) ReadAll(ctx context.Context, after eventstore.Position, limit int) ([]eventstore.RecordedEvent, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	i := sort.Search(len(s.all), func(i int) bool { return after.Less(s.all[i].Position) })
	end := min(len(s.all), i+limit)
	return clone(s.all[i:end]), nil
}

// WaitForEvents implements eventstore.Store.
func (s *Store) WaitForEvents(ctx context.Context, after eventstore.Position) error {
	s.mu.Lock()
	ready := len(s.all) > 0 && after.Less(s.all[len(s.all)-1].Position)
	changed := s.changed
	s.mu.Unlock()
	if ready {
		return nil
	}
	select {
	case <-changed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func clone(events []eventstore.RecordedEvent) []eventstore.RecordedEvent {
	out := make([]eventstore.RecordedEvent, len(events))
	for i, e := range events {
		e.Data = bytes.Clone(e.Data)
		e.Metadata = bytes.Clone(e.Metadata)
		out[i] = e
	}
	return out
}

// Head returns the position of the last event (eventstore.Start when there
// is none).
func (s *Store) Head(context.Context) (eventstore.Position, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.all) == 0 {
		return eventstore.Start, nil
	}
	return s.all[len(s.all)-1].Position, nil
}
