package eventstore

import (
	"errors"
	"fmt"
)

var (
	// ErrWrongExpectedVersion is matched by every failed expected-revision
	// check. Use errors.As with *WrongExpectedVersionError for the details.
	ErrWrongExpectedVersion = errors.New("wrong expected version")
	// ErrStreamNotFound is returned when reading a stream that has no events.
	ErrStreamNotFound = errors.New("stream not found")
	// ErrDuplicateEventID is returned when an event ID already stored in a
	// stream is appended to it again with other content or at another place.
	ErrDuplicateEventID = errors.New("duplicate event id")
	// ErrInvalidEvent is returned for events the store cannot accept (empty
	// type, malformed ID, no events at all).
	ErrInvalidEvent = errors.New("invalid event")
	// ErrUnavailable is matched by the errors of a store that could not be
	// reached or does not take work now (connection refused or lost,
	// server shutting down or starting, out of connections). The
	// operation may or may not have been carried out; trying it again
	// later, with the same event IDs, is safe.
	ErrUnavailable = errors.New("event store unavailable")
)

// WrongExpectedVersionError reports a failed expected-revision check.
type WrongExpectedVersionError struct {
	Stream   string
	Expected ExpectedRevision
	// Exists and Actual describe the stream when the check failed.
	Exists bool
	Actual uint64
}

func (e *WrongExpectedVersionError) Error() string {
	actual := "no stream"
	if e.Exists {
		actual = fmt.Sprintf("revision %d", e.Actual)
	}
	return fmt.Sprintf("append to %s: expected %s, stream is at %s: %v", e.Stream, e.Expected, actual, ErrWrongExpectedVersion)
}

// Is makes errors.Is(err, ErrWrongExpectedVersion) true.
func (e *WrongExpectedVersionError) Is(target error) bool { return target == ErrWrongExpectedVersion }
