package esdbstore

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/google/uuid"

	"github.com/reviewledger/reviewledger/eventstore"
)

// expectedRevision maps the port's condition to the client's option.
func expectedRevision(e eventstore.ExpectedRevision) esdb.ExpectedRevision {
	if n, ok := e.Exact(); ok {
		return esdb.Revision(n)
	}
	switch {
	case e.IsNoStream():
		return esdb.NoStream{}
	case e.IsStreamExists():
		return esdb.StreamExists{}
	default:
		return esdb.Any{}
	}
}

// allPosition maps a position in the port's global order to the client's
// $all position; the zero Position is the start of $all.
func allPosition(p eventstore.Position) esdb.AllPosition {
	if p == eventstore.Start {
		return esdb.Start{}
	}
	return esdb.Position{Commit: p.Commit, Prepare: p.Prepare}
}

// position maps the server's transaction-log position to the port's. Both
// order by commit, then prepare position.
func position(p esdb.Position) eventstore.Position {
	return eventstore.Position{Commit: p.Commit, Prepare: p.Prepare}
}

// isSystem reports whether an event type is the server's own ($-prefixed:
// stream metadata, statistics, links, projections' state). They are neither
// accepted from writers nor shown to ReadAll readers.
func isSystem(eventType string) bool { return strings.HasPrefix(eventType, "$") }

// proposed validates events and converts them for the client. On top of
// the checks every backend makes (eventstore.ValidateAppend: event IDs are
// lowercase UUIDs), stream names and event types must not start with "$",
// which the server reserves for itself.
func proposed(stream string, events []eventstore.EventData) ([]esdb.EventData, error) {
	if err := eventstore.ValidateAppend(stream, events); err != nil {
		return nil, err
	}
	if strings.HasPrefix(stream, "$") {
		return nil, fmt.Errorf("append to %s: stream names starting with $ are the server's: %w", stream, eventstore.ErrInvalidEvent)
	}
	out := make([]esdb.EventData, len(events))
	for i, e := range events {
		id, err := uuid.Parse(e.ID)
		if err != nil {
			return nil, fmt.Errorf("append to %s: event id %q is not a UUID: %w", stream, e.ID, eventstore.ErrInvalidEvent)
		}
		if isSystem(e.Type) {
			return nil, fmt.Errorf("append to %s: event %s: type %q starts with $, reserved for the server: %w", stream, e.ID, e.Type, eventstore.ErrInvalidEvent)
		}
		ct := esdb.ContentTypeBinary
		if len(e.Data) > 0 && json.Valid(e.Data) {
			ct = esdb.ContentTypeJson
		}
		out[i] = esdb.EventData{EventID: id, EventType: e.Type, ContentType: ct, Data: e.Data, Metadata: e.Metadata}
	}
	return out, nil
}

// recorded converts an event read from the server.
func recorded(e *esdb.RecordedEvent) eventstore.RecordedEvent {
	return eventstore.RecordedEvent{
		ID:         e.EventID.String(),
		Stream:     e.StreamID,
		Revision:   e.EventNumber,
		Position:   position(e.Position),
		Type:       e.EventType,
		Data:       nilIfEmpty(e.Data),
		Metadata:   nilIfEmpty(e.UserMetadata),
		RecordedAt: e.CreatedDate.UTC(),
	}
}

func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// slotMatch says how the events already stored where an append would put its
// events compare with the append's.
type slotMatch int

const (
	// slotFree: none of the append's event IDs is stored there.
	slotFree slotMatch = iota
	// slotSame: every event is stored there, in order, with the same
	// content: the append was already made.
	slotSame
	// slotConflict: some ID is stored there, but not the same events in the
	// same order with the same content.
	slotConflict
)

// matchSlot compares the stored events at an append's revisions with the
// append's events.
func matchSlot(stored []eventstore.RecordedEvent, events []eventstore.EventData) slotMatch {
	ids := make(map[string]bool, len(events))
	for _, e := range events {
		ids[canonicalID(e.ID)] = true
	}
	overlap := false
	for _, r := range stored {
		if ids[canonicalID(r.ID)] {
			overlap = true
			break
		}
	}
	if !overlap {
		return slotFree
	}
	if len(stored) != len(events) {
		return slotConflict
	}
	for i, e := range events {
		r := stored[i]
		if canonicalID(r.ID) != canonicalID(e.ID) || r.Type != e.Type || !bytes.Equal(r.Data, e.Data) || !bytes.Equal(r.Metadata, e.Metadata) {
			return slotConflict
		}
	}
	return slotSame
}

// canonicalID is the UUID's canonical spelling, so that IDs written in upper
// case compare equal to the server's lower-case ones.
func canonicalID(id string) string {
	if u, err := uuid.Parse(id); err == nil {
		return u.String()
	}
	return id
}
