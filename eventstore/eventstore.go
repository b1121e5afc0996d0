// Package eventstore is the port every ledger backend implements: append-only
// streams written with expected-revision checks, read one stream at a time or
// all together in one global order.
//
// The package knows nothing of reviews. Events are opaque bytes with a type
// name; the ledger package above it maps domain events onto them. Backends
// live in sub-packages (memstore, pgstore, esdbstore) and all pass the same
// conformance suite (eventstoretest).
package eventstore

import (
	"context"
	"fmt"
	"time"
)

// Store is an append-only event store.
//
// Streams are named by the caller. Revisions start at 0 with the first event
// of a stream and are contiguous. Every event also has a Position in the
// store's global order, which is the same for all readers and never changes.
type Store interface {
	// Append writes events to the end of stream if the stream's current
	// revision matches expected. All events are written or none.
	//
	// When the check fails, the error is a *WrongExpectedVersionError, which
	// matches ErrWrongExpectedVersion with errors.Is.
	//
	// Append is idempotent by event ID: appending events whose IDs are already
	// in the stream at the revisions that expected would give them succeeds
	// without writing anything and returns the original result. Reusing an ID
	// of the stream for different content, or in a different place of the
	// stream, is ErrDuplicateEventID. An event ID is unique within its
	// stream, not across the store: an ID stored in another stream is not
	// looked for, and the append writes it (no backend keeps an index of
	// every ID for that check; the ledger draws a fresh random ID for every
	// event).
	Append(ctx context.Context, stream string, expected ExpectedRevision, events ...EventData) (AppendResult, error)

	// AppendMulti appends to several streams in one call. Each stream is
	// checked against its own expected revision and written or refused
	// independently of the others: one stream failing its check, or being an
	// idempotent re-append (same event IDs already stored where expected
	// puts them: success with the original result), affects only that
	// stream's result. results[i] belongs to appends[i]. A stream may appear
	// at most once per call. The error is for the call as a whole (invalid
	// input: nothing written; context or connection: any subset may have
	// been written, and repeating the call with the same event IDs is safe).
	//
	// Invalid input is what ValidateAppendMulti refuses; the error matches
	// ErrInvalidEvent. A backend may write the streams of one call in one
	// transaction (memstore, pgstore) or one by one (esdbstore); the port
	// promises no atomicity across streams.
	AppendMulti(ctx context.Context, appends ...StreamAppend) ([]StreamResult, error)

	// ReadStream returns the events of stream with revision >= from, in
	// revision order. A stream with no events is ErrStreamNotFound.
	ReadStream(ctx context.Context, stream string, from uint64) ([]RecordedEvent, error)

	// ReadAll returns at most limit events whose position sorts after the
	// given one, in global order. The order is gap-safe: once a reader has
	// seen position P, no event that sorts before P becomes visible later.
	// The zero Position is before every event.
	ReadAll(ctx context.Context, after Position, limit int) ([]RecordedEvent, error)

	// WaitForEvents blocks until events after the given position may have
	// become readable, or ctx is done (then it returns ctx.Err()). It may
	// return early without new events; callers read and wait again.
	WaitForEvents(ctx context.Context, after Position) error
}

// EventData is an event to append.
type EventData struct {
	// ID identifies the event across retries of the same append. It is a
	// UUID chosen by the writer.
	ID string
	// Type is the event's stable type name, e.g. "Submitted".
	Type string
	// Data is the event body, JSON.
	Data []byte
	// Metadata is JSON about the event (schema version, actor, hash chain).
	Metadata []byte
}

// StreamAppend is one stream's part of a multi-stream append.
type StreamAppend struct {
	Stream   string
	Expected ExpectedRevision
	Events   []EventData
}

// StreamResult is the outcome of one StreamAppend.
type StreamResult struct {
	AppendResult // valid when Err is nil
	// Err is nil, or what Append would have returned for this stream alone:
	// a *WrongExpectedVersionError (errors.Is ErrWrongExpectedVersion),
	// ErrDuplicateEventID, or a refusal of the stream particular to a
	// backend. Failures of the call as a whole are AppendMulti's error.
	Err error
}

// RecordedEvent is an event as stored.
type RecordedEvent struct {
	ID         string
	Stream     string
	Revision   uint64
	Position   Position
	Type       string
	Data       []byte
	Metadata   []byte
	RecordedAt time.Time
}

// AppendResult describes a successful append.
type AppendResult struct {
	// NextRevision is the stream's revision after the append: the revision of
	// the last event written.
	NextRevision uint64
	// Position is the global position of the last event written.
	Position Position
}

// Position is a place in the store's global order. Backends fill the two
// parts as suits them (PostgreSQL: transaction ID and sequence; EventStoreDB:
// commit and prepare positions); they compare lexicographically.
type Position struct {
	Commit  uint64
	Prepare uint64
}

// Start is the position before every event.
var Start = Position{}

// Less reports whether p sorts before q.
func (p Position) Less(q Position) bool {
	if p.Commit != q.Commit {
		return p.Commit < q.Commit
	}
	return p.Prepare < q.Prepare
}

func (p Position) String() string { return fmt.Sprintf("%d/%d", p.Commit, p.Prepare) }

// ExpectedRevision is the condition an append states about its stream.
type ExpectedRevision struct {
	kind expectKind
	rev  uint64
}

type expectKind uint8

const (
	expectAny expectKind = iota
	expectNoStream
	expectStreamExists
	expectExact
)

var (
	// Any appends whatever the stream's state. Nothing in the review path
	// uses it.
	Any = ExpectedRevision{kind: expectAny}
	// NoStream appends only if the stream has no events.
	NoStream = ExpectedRevision{kind: expectNoStream}
	// StreamExists appends only if the stream has at least one event.
	StreamExists = ExpectedRevision{kind: expectStreamExists}
)

// Exact appends only if the stream's last event has revision n.
func Exact(n uint64) ExpectedRevision { return ExpectedRevision{kind: expectExact, rev: n} }

// IsAny, IsNoStream, IsStreamExists report the kind of condition.
func (e ExpectedRevision) IsAny() bool          { return e.kind == expectAny }
func (e ExpectedRevision) IsNoStream() bool     { return e.kind == expectNoStream }
func (e ExpectedRevision) IsStreamExists() bool { return e.kind == expectStreamExists }

// Exact returns the revision of an Exact condition and true, or 0 and false.
func (e ExpectedRevision) Exact() (uint64, bool) { return e.rev, e.kind == expectExact }

func (e ExpectedRevision) String() string {
	switch e.kind {
	case expectNoStream:
		return "no stream"
	case expectStreamExists:
		return "stream exists"
	case expectExact:
		return fmt.Sprintf("revision %d", e.rev)
	default:
		return "any"
	}
}

// Satisfied reports whether a stream whose current state is (exists, current)
// satisfies e. Backends share it so the rule is written once.
func (e ExpectedRevision) Satisfied(exists bool, current uint64) bool {
	switch e.kind {
	case expectNoStream:
		return !exists
	case expectStreamExists:
		return exists
	case expectExact:
		return exists && current == e.rev
	default:
		return true
	}
}
