package esdbstore

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"

	"github.com/reviewledger/reviewledger/eventstore"
)

// Append implements eventstore.Store.
//
// The server checks the expected revision, and recognises an append repeated
// at the same expected revision by its event IDs. The port asks for more, so
// an append takes up to three round trips:
//
//  1. Unless expected is NoStream, the stream is read first: the server does
//     not notice an event ID stored at another revision of the stream (it
//     would store the event twice), and when the whole append is already
//     stored where expected puts it, its original result is returned without
//     writing.
//  2. The append itself.
//  3. The events at the revisions the server reports are read back: they
//     must be this append's, content included (the server compares IDs
//     only), and they give the positions of the result.
//
// An event ID used in another stream is not detected; docs/esdbstore.md
// explains why.
func (s *Store) Append(ctx context.Context, stream string, expected eventstore.ExpectedRevision, events ...eventstore.EventData) (eventstore.AppendResult, error) {
	data, err := proposed(stream, events)
	if err != nil {
		return eventstore.AppendResult{}, err
	}
	c, err := s.conn()
	if err != nil {
		return eventstore.AppendResult{}, fmt.Errorf("append to %s: %w", stream, err)
	}
	res, err := s.appendData(ctx, c, stream, expected, events, data)
	if err == nil || streamErr(err) {
		s.found(c)
	}
	return res, err
}

// appendData is Append with the events validated and converted (data) and
// the client chosen.
func (s *Store) appendData(ctx context.Context, c *esdb.Client, stream string, expected eventstore.ExpectedRevision, events []eventstore.EventData, data []esdb.EventData) (eventstore.AppendResult, error) {
	if !expected.IsNoStream() {
		stored, err := s.readWhole(ctx, c, stream)
		if err != nil {
			return eventstore.AppendResult{}, fmt.Errorf("append to %s: %w", stream, err)
		}
		if res, done, err := placed(stream, expected, stored, events); done || err != nil {
			return res, err
		}
	}
	wr, err := c.AppendToStream(ctx, stream, esdb.AppendToStreamOptions{ExpectedRevision: expectedRevision(expected)}, data...)
	if err != nil {
		s.renew(c, err)
		if cd, ok := code(err); ok && cd == esdb.ErrorCodeWrongExpectedVersion {
			return s.wrongExpected(ctx, c, stream, expected, events, err)
		}
		return eventstore.AppendResult{}, translate(ctx, "append to "+stream, err)
	}
	return s.confirm(ctx, c, stream, events, wr.NextExpectedVersion)
}

// readWhole reads all of stream; a stream without events reads as none.
func (s *Store) readWhole(ctx context.Context, c *esdb.Client, stream string) ([]eventstore.RecordedEvent, error) {
	stored, err := s.readStream(ctx, c, stream, 0, math.MaxInt64, true)
	if errors.Is(err, eventstore.ErrStreamNotFound) && !errors.Is(err, ErrStreamDeleted) {
		return nil, nil
	}
	return stored, err
}

// confirm reads back the events the server says it holds at revisions
// last-len(events)+1 .. last and returns the append's result from them.
func (s *Store) confirm(ctx context.Context, c *esdb.Client, stream string, events []eventstore.EventData, last uint64) (eventstore.AppendResult, error) {
	n := uint64(len(events))
	if last+1 < n {
		return eventstore.AppendResult{}, fmt.Errorf("append to %s: server reports revision %d after %d events: %w", stream, last, n, ErrServer)
	}
	first := last + 1 - n
	stored, err := s.readStream(ctx, c, stream, first, n, true)
	if err != nil {
		return eventstore.AppendResult{}, fmt.Errorf("append to %s: read back: %w", stream, err)
	}
	switch matchSlot(stored, events) {
	case slotSame:
		return result(stored), nil
	case slotConflict:
		return eventstore.AppendResult{}, fmt.Errorf("append to %s: revisions %d-%d hold other events under these IDs: %w", stream, first, last, eventstore.ErrDuplicateEventID)
	default:
		return eventstore.AppendResult{}, fmt.Errorf("append to %s: server reports revisions %d-%d written, but they hold other events: %w", stream, first, last, ErrServer)
	}
}

// wrongExpected handles a failed expected-revision check: the append may
// have been made meanwhile (then its original result), its IDs may be
// stored elsewhere in the stream (ErrDuplicateEventID), or it is a plain
// conflict (*eventstore.WrongExpectedVersionError).
func (s *Store) wrongExpected(ctx context.Context, c *esdb.Client, stream string, expected eventstore.ExpectedRevision, events []eventstore.EventData, cause error) (eventstore.AppendResult, error) {
	stored, err := s.readWhole(ctx, c, stream)
	if err != nil {
		return eventstore.AppendResult{}, fmt.Errorf("append to %s: %w", stream, err)
	}
	if res, done, err := placed(stream, expected, stored, events); done || err != nil {
		return res, err
	}
	exists, current, ok := parseCurrent(cause.Error())
	if !ok && len(stored) > 0 {
		exists, current = true, stored[len(stored)-1].Revision
	}
	return eventstore.AppendResult{}, &eventstore.WrongExpectedVersionError{Stream: stream, Expected: expected, Exists: exists, Actual: current}
}

// placed decides an append from the stream's stored events when any of the
// append's IDs is among them: done with the original result when the whole
// append is stored where expected puts it, ErrDuplicateEventID otherwise.
// When none is, it returns done false and the append goes to the server.
func placed(stream string, expected eventstore.ExpectedRevision, stored []eventstore.RecordedEvent, events []eventstore.EventData) (eventstore.AppendResult, bool, error) {
	at := make(map[string]int, len(stored))
	for i, r := range stored {
		at[canonicalID(r.ID)] = i
	}
	start, found := at[canonicalID(events[0].ID)]
	if !found {
		for _, e := range events[1:] {
			if _, dup := at[canonicalID(e.ID)]; dup {
				return eventstore.AppendResult{}, false, fmt.Errorf("append to %s: event %s is already stored: %w", stream, e.ID, eventstore.ErrDuplicateEventID)
			}
		}
		return eventstore.AppendResult{}, false, nil
	}
	rev := stored[start].Revision
	want, named := slotStart(expected)
	if (named && rev != want) || start+len(events) > len(stored) {
		return eventstore.AppendResult{}, false, fmt.Errorf("append to %s: event %s is already stored at revision %d: %w", stream, events[0].ID, rev, eventstore.ErrDuplicateEventID)
	}
	slot := stored[start : start+len(events)]
	if matchSlot(slot, events) != slotSame {
		return eventstore.AppendResult{}, false, fmt.Errorf("append to %s: revisions from %d hold other events under these IDs: %w", stream, rev, eventstore.ErrDuplicateEventID)
	}
	return result(slot), true, nil
}

// slotStart returns the revision an append's first event gets when its
// condition names one (NoStream, Exact).
func slotStart(expected eventstore.ExpectedRevision) (uint64, bool) {
	if n, ok := expected.Exact(); ok {
		return n + 1, true
	}
	if expected.IsNoStream() {
		return 0, true
	}
	return 0, false
}

func result(stored []eventstore.RecordedEvent) eventstore.AppendResult {
	last := stored[len(stored)-1]
	return eventstore.AppendResult{NextRevision: last.Revision, Position: last.Position}
}
