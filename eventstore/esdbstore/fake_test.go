package esdbstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/esdbstore/esdbfake"
	"github.com/reviewledger/reviewledger/eventstore/eventstoretest"
)

// openFake opens a store on a fresh fake server.
func openFake(t *testing.T, f *esdbfake.Server) *Store {
	t.Helper()
	url := f.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Open(ctx, url)
	if err != nil {
		t.Fatalf("open fake server: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// TestFakeServerConformance runs the conformance suite through the real
// client against the in-process fake: it checks this package's use of the
// client (options, replies, errors, paging, subscriptions), not the server.
func TestFakeServerConformance(t *testing.T) {
	eventstoretest.Run(t, func(t *testing.T) eventstore.Store {
		return openFake(t, &esdbfake.Server{})
	})
}

func TestOpenAccessDenied(t *testing.T) {
	url := (&esdbfake.Server{DenyAll: true}).Start(t)
	s, err := Open(context.Background(), url)
	if !errors.Is(err, ErrAccessDenied) {
		t.Fatalf("Open without $all rights: %v, want ErrAccessDenied", err)
	}
	if s != nil {
		t.Fatal("Open returned a store with its error")
	}
}

func TestReadAllSkipsSystemRecordsAcrossBatches(t *testing.T) {
	f := &esdbfake.Server{}
	s := openFake(t, f)
	s.cfg.ReadBatch = 2 // smaller than the runs of system records below
	ctx := context.Background()
	var want []string
	for i := range 5 {
		e := eventstore.EventData{ID: eventstoretest.NewID(), Type: "Happened", Data: []byte(`{}`)}
		if _, err := s.Append(ctx, "s", eventstore.Any, e); err != nil {
			t.Fatal(err)
		}
		want = append(want, e.ID)
		for range i {
			f.System("$stats-x", "$statsCollected")
		}
	}
	for _, limit := range []int{1, 2, 3, 100} {
		var got []string
		pos := eventstore.Start
		for {
			batch, err := s.ReadAll(ctx, pos, limit)
			if err != nil {
				t.Fatal(err)
			}
			if len(batch) == 0 {
				break
			}
			if len(batch) > limit {
				t.Fatalf("limit %d: %d events", limit, len(batch))
			}
			for _, r := range batch {
				if isSystem(r.Type) {
					t.Fatalf("limit %d: system record %s returned", limit, r.Type)
				}
				got = append(got, r.ID)
			}
			pos = batch[len(batch)-1].Position
		}
		if len(got) != len(want) {
			t.Fatalf("limit %d: read %v, want %v", limit, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("limit %d: read %v, want %v", limit, got, want)
			}
		}
	}
}

func TestWrongExpectedVersionDetails(t *testing.T) {
	s := openFake(t, &esdbfake.Server{})
	ctx := context.Background()
	e := func() eventstore.EventData {
		return eventstore.EventData{ID: eventstoretest.NewID(), Type: "Happened", Data: []byte(`{}`)}
	}
	if _, err := s.Append(ctx, "review-r1", eventstore.NoStream, e(), e(), e()); err != nil {
		t.Fatal(err)
	}
	_, err := s.Append(ctx, "review-r1", eventstore.Exact(1), e())
	var wev *eventstore.WrongExpectedVersionError
	if !errors.As(err, &wev) || !wev.Exists || wev.Actual != 2 || wev.Stream != "review-r1" || wev.Expected != eventstore.Exact(1) {
		t.Fatalf("stale append: %v (%+v), want actual revision 2", err, wev)
	}
	_, err = s.Append(ctx, "review-r2", eventstore.StreamExists, e())
	if !errors.As(err, &wev) || wev.Exists {
		t.Fatalf("append to a missing stream at StreamExists: %v, want no stream", err)
	}
}

// TestWaitForEventsAfterItsPosition: a subscription that delivered the event
// at its start position (the server's rule is to start after it) must not
// make WaitForEvents return, or its callers would spin.
func TestWaitForEventsAfterItsPosition(t *testing.T) {
	s := openFake(t, &esdbfake.Server{Inclusive: true})
	res, err := s.Append(context.Background(), "s", eventstore.NoStream, eventstore.EventData{ID: eventstoretest.NewID(), Type: "Happened"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WaitForEvents(context.Background(), eventstore.Start); err != nil {
		t.Fatalf("WaitForEvents(Start) with an event stored: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := s.WaitForEvents(ctx, res.Position); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitForEvents after the last event: %v, want it to wait until ctx ends", err)
	}
}

// TestAppendMultiConcurrency checks that AppendMulti appends its streams
// concurrently, never more than multiConcurrency at once: the fake holds
// every append until that many are in flight (or a while has passed).
func TestAppendMultiConcurrency(t *testing.T) {
	var (
		mu               sync.Mutex
		inFlight, peak   int
		full             = make(chan struct{})
		fill             = sync.OnceFunc(func() { close(full) }) // the in-flight count reaches the limit again later
		streams, written = 3 * multiConcurrency, 0
	)
	f := &esdbfake.Server{Gate: func() func() {
		mu.Lock()
		inFlight++
		peak = max(peak, inFlight)
		if inFlight == multiConcurrency {
			fill()
		}
		mu.Unlock()
		select {
		case <-full:
		case <-time.After(5 * time.Second):
		}
		return func() {
			mu.Lock()
			defer mu.Unlock()
			inFlight--
			written++
		}
	}}
	s := openFake(t, f)
	appends := make([]eventstore.StreamAppend, streams)
	for i := range appends {
		appends[i] = eventstore.StreamAppend{
			Stream:   fmt.Sprintf("review-r%d", i),
			Expected: eventstore.NoStream,
			Events:   []eventstore.EventData{{ID: eventstoretest.NewID(), Type: "Happened", Data: []byte(`{}`)}},
		}
	}
	results, err := s.AppendMulti(context.Background(), appends...)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range results {
		if r.Err != nil || r.NextRevision != 0 {
			t.Fatalf("%s: %+v", appends[i].Stream, r)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if peak != multiConcurrency || written != streams {
		t.Fatalf("%d appends, at most %d at once; want %d, %d at once", written, peak, streams, multiConcurrency)
	}
}
