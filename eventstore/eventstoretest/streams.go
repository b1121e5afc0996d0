package eventstoretest

import (
	"context"
	"slices"
	"testing"

	"github.com/reviewledger/reviewledger/eventstore"
)

// streamsReader is the read of many streams at once that the backends
// offer beside ReadStream (an auditor's read of every review).
type streamsReader interface {
	ReadStreams(ctx context.Context, names []string) (map[string][]eventstore.RecordedEvent, error)
}

// testReadStreams: ReadStreams gives every named stream that exists
// exactly as ReadStream does, leaves out those that do not, and reads
// nothing for no names.
func testReadStreams(t *testing.T, s eventstore.Store) {
	r, ok := s.(streamsReader)
	if !ok {
		t.Fatalf("%T has no ReadStreams: every backend reads many streams at once", s)
	}
	a, b, c, missing := streamName("a"), streamName("b"), streamName("c"), streamName("missing")
	mustAppend(t, s, a, eventstore.NoStream, events(3, "A")...)
	mustAppend(t, s, b, eventstore.NoStream, events(1, "B")...)
	mustAppend(t, s, c, eventstore.NoStream, events(2, "C")...)
	mustAppend(t, s, a, eventstore.Exact(2), events(2, "A")...)

	got, err := r.ReadStreams(ctxFor(t), []string{b, missing, a})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("ReadStreams of %s, %s (missing) and %s: %d streams, want 2", b, missing, a, len(got))
	}
	for _, name := range []string{a, b} {
		want, err := s.ReadStream(ctxFor(t), name, 0)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.EqualFunc(got[name], want, sameEvent) {
			t.Errorf("ReadStreams of %s:\n got %v\nwant %v (ReadStream)", name, got[name], want)
		}
	}
	if none, err := r.ReadStreams(ctxFor(t), nil); err != nil || len(none) != 0 {
		t.Errorf("ReadStreams of no names: %d streams, %v; want none", len(none), err)
	}
}

func sameEvent(x, y eventstore.RecordedEvent) bool {
	return x.ID == y.ID && x.Stream == y.Stream && x.Revision == y.Revision && x.Type == y.Type &&
		x.Position == y.Position && string(x.Data) == string(y.Data) && string(x.Metadata) == string(y.Metadata) &&
		x.RecordedAt.Equal(y.RecordedAt)
}
