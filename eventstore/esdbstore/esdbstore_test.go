package esdbstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"

	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/eventstoretest"
	"github.com/reviewledger/reviewledger/eventstore/memstore"
)

// TestConformance runs the port's conformance suite against the server at
// KURRENTDB_URL, e.g.
//
//	KURRENTDB_URL=esdb://localhost:2113?tls=false go test ./eventstore/esdbstore/
func TestConformance(t *testing.T) {
	url := os.Getenv("KURRENTDB_URL")
	if url == "" {
		t.Skip("KURRENTDB_URL is not set: the conformance suite needs an EventStoreDB/KurrentDB server, e.g. KURRENTDB_URL=esdb://localhost:2113?tls=false (docs/esdbstore.md)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Open(ctx, url)
	if err != nil {
		t.Fatalf("KURRENTDB_URL: %v", err)
	}
	t.Cleanup(s.Close)
	eventstoretest.Run(t, func(t *testing.T) eventstore.Store {
		return newNamespaced(t, s, endOfAll(t, s))
	})
}

// TestNamespacedView runs the suite through the same view over one
// in-memory store shared by all subtests, so that the view is known to be
// right where no server is at hand: a failure of TestConformance is then the
// backend's.
func TestNamespacedView(t *testing.T) {
	shared := memstore.New()
	eventstoretest.Run(t, func(t *testing.T) eventstore.Store {
		var floor eventstore.Position
		for {
			got, err := shared.ReadAll(context.Background(), floor, 1000)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) == 0 {
				return newNamespaced(t, shared, floor)
			}
			floor = got[len(got)-1].Position
		}
	})
}

// endOfAll returns the position of the last record in $all.
func endOfAll(t *testing.T, s *Store) eventstore.Position {
	t.Helper()
	c, err := s.conn()
	if err != nil {
		t.Fatal(err)
	}
	last, err := s.readAllRaw(context.Background(), c, esdb.ReadAllOptions{Direction: esdb.Backwards, From: esdb.End{}}, 1)
	if err != nil {
		t.Fatalf("read the end of $all: %v", err)
	}
	if len(last) == 0 {
		return eventstore.Start
	}
	return position(last[0].Position)
}

// namespaced is the view of a shared store that one conformance subtest
// gets. A server cannot be emptied between tests, and the suite's subtests
// run in parallel, so each view prefixes its streams with a name of its own,
// and its global order holds only those streams, from floor (the end of the
// global order when the view was made) on. Everything else is the
// underlying store's.
type namespaced struct {
	store  eventstore.Store
	prefix string
	floor  eventstore.Position
}

var _ eventstore.Store = (*namespaced)(nil)

const viewBatch = 256

func newNamespaced(t *testing.T, s eventstore.Store, floor eventstore.Position) *namespaced {
	t.Helper()
	return &namespaced{store: s, prefix: "t" + eventstoretest.NewID()[:8] + "-", floor: floor}
}

func (n *namespaced) name(stream string) string {
	if stream == "" {
		return ""
	}
	return n.prefix + stream
}

func (n *namespaced) own(r eventstore.RecordedEvent) (eventstore.RecordedEvent, bool) {
	stream, ok := strings.CutPrefix(r.Stream, n.prefix)
	r.Stream = stream
	return r, ok
}

func (n *namespaced) Append(ctx context.Context, stream string, expected eventstore.ExpectedRevision, events ...eventstore.EventData) (eventstore.AppendResult, error) {
	res, err := n.store.Append(ctx, n.name(stream), expected, events...)
	return res, n.plain(err)
}

func (n *namespaced) AppendMulti(ctx context.Context, appends ...eventstore.StreamAppend) ([]eventstore.StreamResult, error) {
	named := make([]eventstore.StreamAppend, len(appends))
	for i, a := range appends {
		named[i] = a
		named[i].Stream = n.name(a.Stream)
	}
	results, err := n.store.AppendMulti(ctx, named...)
	for i := range results {
		results[i].Err = n.plain(results[i].Err)
	}
	return results, err
}

// plain renames the stream of a wrong-expected-version error back to the
// view's name.
func (n *namespaced) plain(err error) error {
	var wev *eventstore.WrongExpectedVersionError
	if errors.As(err, &wev) {
		plain := *wev
		plain.Stream, _ = strings.CutPrefix(wev.Stream, n.prefix)
		return &plain
	}
	return err
}

func (n *namespaced) ReadStream(ctx context.Context, stream string, from uint64) ([]eventstore.RecordedEvent, error) {
	got, err := n.store.ReadStream(ctx, n.name(stream), from)
	for i := range got {
		got[i], _ = n.own(got[i])
	}
	return got, err
}

// ReadStreams is the shared store's, in the view's names.
func (n *namespaced) ReadStreams(ctx context.Context, names []string) (map[string][]eventstore.RecordedEvent, error) {
	named := make([]string, len(names))
	for i, name := range names {
		named[i] = n.name(name)
	}
	r, ok := n.store.(interface {
		ReadStreams(context.Context, []string) (map[string][]eventstore.RecordedEvent, error)
	})
	if !ok {
		return nil, fmt.Errorf("%T has no ReadStreams", n.store)
	}
	got, err := r.ReadStreams(ctx, named)
	out := make(map[string][]eventstore.RecordedEvent, len(got))
	for name, events := range got {
		for i := range events {
			events[i], _ = n.own(events[i])
		}
		plain, _ := strings.CutPrefix(name, n.prefix)
		out[plain] = events
	}
	return out, err
}

func (n *namespaced) ReadAll(ctx context.Context, after eventstore.Position, limit int) ([]eventstore.RecordedEvent, error) {
	if limit <= 0 {
		return nil, nil
	}
	if after.Less(n.floor) {
		after = n.floor
	}
	var out []eventstore.RecordedEvent
	for {
		got, err := n.store.ReadAll(ctx, after, viewBatch)
		if err != nil {
			return nil, err
		}
		for _, r := range got {
			after = r.Position
			if r, ok := n.own(r); ok {
				out = append(out, r)
				if len(out) == limit {
					return out, nil
				}
			}
		}
		if len(got) < viewBatch {
			return out, nil
		}
	}
}

// WaitForEvents waits until an event of the view's own is readable: the
// underlying store wakes for every stream, and the suite checks that the
// view does not return early forever once its ctx has ended.
func (n *namespaced) WaitForEvents(ctx context.Context, after eventstore.Position) error {
	if after.Less(n.floor) {
		after = n.floor
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		got, err := n.store.ReadAll(ctx, after, viewBatch)
		if err != nil {
			return err
		}
		for _, r := range got {
			if _, ok := n.own(r); ok {
				return nil
			}
			after = r.Position
		}
		if len(got) == 0 {
			if err := n.store.WaitForEvents(ctx, after); err != nil {
				return err
			}
		}
	}
}
