// Package eventstoretest is the conformance suite every eventstore.Store
// backend runs:
//
//	func TestConformance(t *testing.T) {
//		eventstoretest.Run(t, func(t *testing.T) eventstore.Store {
//			return newStoreForTest(t) // empty, released in t.Cleanup
//		})
//	}
//
// It tests only what the eventstore.Store doc comments promise. Every subtest
// asks newStore for a store of its own; stream names are unique per subtest,
// but the ReadAll subtests expect no other writer to be appending to the same
// store while they run.
package eventstoretest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/eventstore"
)

// Run runs the whole suite against stores made by newStore.
func Run(t *testing.T, newStore func(t *testing.T) eventstore.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s eventstore.Store)
	}{
		{"AppendAndReadStream", testAppendAndReadStream},
		{"ExpectedRevision", testExpectedRevision},
		{"InvalidEvents", testInvalidEvents},
		{"ReadMissingStream", testReadMissingStream},
		{"ReadStreams", testReadStreams},
		{"ReadAll", testReadAll},
		{"IdempotentAppend", testIdempotentAppend},
		{"DuplicateEventID", testDuplicateEventID},
		{"EventIDPerStream", testEventIDPerStream},
		{"ConcurrentAppendSameRevision", testConcurrentSameRevision},
		{"ConcurrentAppendAny", testConcurrentAny},
		{"ConcurrentRetry", testConcurrentRetry},
		{"GapFreeGlobalOrder", testGapFree},
		{"WaitForEvents", testWaitForEvents},
		{"AppendMultiMixed", testMultiMixed},
		{"AppendMultiIdempotent", testMultiIdempotent},
		{"AppendMultiDuplicateEventID", testMultiDuplicateEventID},
		{"AppendMultiInvalid", testMultiInvalid},
		{"AppendMultiConcurrent", testMultiConcurrent},
		{"AppendMultiGapFree", testMultiGapFree},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newStore(t))
		})
	}
}

// NewID returns a random lowercase UUID (version 4) for an event ID.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// streamName returns a stream name no other test uses.
func streamName(label string) string {
	return fmt.Sprintf("%s-%s", label, NewID()[:8])
}

func event(typ string, data string) eventstore.EventData {
	return eventstore.EventData{ID: NewID(), Type: typ, Data: []byte(data), Metadata: []byte(`{"schema":1}`)}
}

func events(n int, typ string) []eventstore.EventData {
	out := make([]eventstore.EventData, n)
	for i := range out {
		out[i] = event(typ, fmt.Sprintf(`{"n": %d}`, i))
	}
	return out
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustAppend(t *testing.T, s eventstore.Store, stream string, expected eventstore.ExpectedRevision, evs ...eventstore.EventData) eventstore.AppendResult {
	t.Helper()
	res, err := s.Append(ctxFor(t), stream, expected, evs...)
	if err != nil {
		t.Fatalf("append %d events to %s at %s: %v", len(evs), stream, expected, err)
	}
	return res
}

func mustRead(t *testing.T, s eventstore.Store, stream string, from uint64) []eventstore.RecordedEvent {
	t.Helper()
	got, err := s.ReadStream(ctxFor(t), stream, from)
	if err != nil {
		t.Fatalf("read %s from %d: %v", stream, from, err)
	}
	return got
}

// checkSame fails unless got records want, appended at revision first on.
func checkSame(t *testing.T, stream string, first uint64, got []eventstore.RecordedEvent, want []eventstore.EventData) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: read %d events, want %d", stream, len(got), len(want))
	}
	for i, r := range got {
		w := want[i]
		if r.ID != w.ID || r.Stream != stream || r.Revision != first+uint64(i) || r.Type != w.Type ||
			!bytes.Equal(r.Data, w.Data) || !bytes.Equal(r.Metadata, w.Metadata) {
			t.Fatalf("%s: event %d is %+v, want %+v at revision %d", stream, i, r, w, first+uint64(i))
		}
		if r.RecordedAt.IsZero() {
			t.Errorf("%s: event %d has no RecordedAt", stream, i)
		}
		if i > 0 && !got[i-1].Position.Less(r.Position) {
			t.Errorf("%s: position %s of revision %d does not sort after %s", stream, r.Position, r.Revision, got[i-1].Position)
		}
	}
}

// checkWrongVersion fails unless err is a wrong-expected-version error with
// the given details.
func checkWrongVersion(t *testing.T, err error, stream string, expected eventstore.ExpectedRevision, exists bool, actual uint64) {
	t.Helper()
	if !errors.Is(err, eventstore.ErrWrongExpectedVersion) {
		t.Fatalf("append to %s at %s: got %v, want ErrWrongExpectedVersion", stream, expected, err)
	}
	var wev *eventstore.WrongExpectedVersionError
	if !errors.As(err, &wev) {
		t.Fatalf("append to %s at %s: %v is not a *WrongExpectedVersionError", stream, expected, err)
	}
	if wev.Stream != stream || wev.Expected != expected || wev.Exists != exists || (exists && wev.Actual != actual) {
		t.Fatalf("append to %s at %s: got %+v, want exists=%v actual=%d", stream, expected, *wev, exists, actual)
	}
}
