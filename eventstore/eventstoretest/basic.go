package eventstoretest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/eventstore"
)

func testAppendAndReadStream(t *testing.T, s eventstore.Store) {
	stream := streamName("basic")
	evs := events(3, "Happened")
	evs[1].Data = []byte(`{"spacing" :  "kept",   "order": [3, 1]}`)
	evs[2].Data, evs[2].Metadata = nil, nil

	res := mustAppend(t, s, stream, eventstore.NoStream, evs...)
	if res.NextRevision != 2 {
		t.Fatalf("NextRevision after 3 events: %d, want 2", res.NextRevision)
	}
	got := mustRead(t, s, stream, 0)
	checkSame(t, stream, 0, got, evs)
	if got[2].Position != res.Position {
		t.Errorf("AppendResult.Position %s, last event at %s", res.Position, got[2].Position)
	}

	more := events(2, "Followed")
	res2 := mustAppend(t, s, stream, eventstore.Exact(2), more...)
	if res2.NextRevision != 4 || !res.Position.Less(res2.Position) {
		t.Fatalf("second append: %+v after %+v", res2, res)
	}
	checkSame(t, stream, 2, mustRead(t, s, stream, 2), append(evs[2:], more...))
	checkSame(t, stream, 4, mustRead(t, s, stream, 4), more[1:])
	if rest := mustRead(t, s, stream, 5); len(rest) != 0 {
		t.Fatalf("read past the end: %d events, want none", len(rest))
	}
}

func testExpectedRevision(t *testing.T, s eventstore.Store) {
	// existing has revisions 0 and 1.
	existing := streamName("existing")
	mustAppend(t, s, existing, eventstore.NoStream, events(2, "Happened")...)

	tests := []struct {
		name     string
		existing bool
		expected eventstore.ExpectedRevision
		ok       bool
	}{
		{"any on missing stream", false, eventstore.Any, true},
		{"any on existing stream", true, eventstore.Any, true},
		{"no stream on missing stream", false, eventstore.NoStream, true},
		{"no stream on existing stream", true, eventstore.NoStream, false},
		{"stream exists on missing stream", false, eventstore.StreamExists, false},
		{"stream exists on existing stream", true, eventstore.StreamExists, true},
		{"exact current revision", true, eventstore.Exact(1), true},
		{"exact stale revision", true, eventstore.Exact(0), false},
		{"exact future revision", true, eventstore.Exact(2), false},
		{"exact 0 on missing stream", false, eventstore.Exact(0), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stream := streamName("missing")
			if tc.existing {
				stream = streamName("existing")
				mustAppend(t, s, stream, eventstore.NoStream, events(2, "Happened")...)
			}
			e := event("Tried", `{}`)
			res, err := s.Append(ctxFor(t), stream, tc.expected, e)
			if tc.ok {
				if err != nil {
					t.Fatalf("append at %s: %v", tc.expected, err)
				}
				want := uint64(0)
				if tc.existing {
					want = 2
				}
				if res.NextRevision != want {
					t.Fatalf("NextRevision %d, want %d", res.NextRevision, want)
				}
				checkSame(t, stream, want, mustRead(t, s, stream, want), []eventstore.EventData{e})
				return
			}
			checkWrongVersion(t, err, stream, tc.expected, tc.existing, 1)
			// A failed append writes nothing.
			got, err := s.ReadStream(ctxFor(t), stream, 0)
			switch {
			case tc.existing && len(got) != 2:
				t.Fatalf("stream has %d events after a failed append, want 2", len(got))
			case !tc.existing && !errors.Is(err, eventstore.ErrStreamNotFound):
				t.Fatalf("missing stream after a failed append: %d events, %v", len(got), err)
			}
		})
	}
}

func testInvalidEvents(t *testing.T, s eventstore.Store) {
	stream := streamName("invalid")
	tests := map[string][]eventstore.EventData{
		"no events":    nil,
		"empty type":   {{ID: NewID(), Type: "", Data: []byte(`{}`)}},
		"malformed id": {{ID: "not-a-uuid", Type: "Happened", Data: []byte(`{}`)}},
	}
	for name, evs := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := s.Append(ctxFor(t), stream, eventstore.Any, evs...)
			if !errors.Is(err, eventstore.ErrInvalidEvent) {
				t.Fatalf("got %v, want ErrInvalidEvent", err)
			}
		})
	}
	if _, err := s.ReadStream(ctxFor(t), stream, 0); !errors.Is(err, eventstore.ErrStreamNotFound) {
		t.Fatalf("stream after invalid appends: %v, want ErrStreamNotFound", err)
	}
}

func testReadMissingStream(t *testing.T, s eventstore.Store) {
	for _, from := range []uint64{0, 1, 100} {
		got, err := s.ReadStream(ctxFor(t), streamName("nobody"), from)
		if !errors.Is(err, eventstore.ErrStreamNotFound) {
			t.Fatalf("read missing stream from %d: %d events, %v; want ErrStreamNotFound", from, len(got), err)
		}
	}
}

func testReadAll(t *testing.T, s eventstore.Store) {
	a, b := streamName("a"), streamName("b")
	var want []eventstore.EventData
	var results []eventstore.AppendResult
	add := func(stream string, expected eventstore.ExpectedRevision, evs ...eventstore.EventData) {
		results = append(results, mustAppend(t, s, stream, expected, evs...))
		want = append(want, evs...)
	}
	add(a, eventstore.NoStream, events(2, "A")...)
	add(b, eventstore.NoStream, events(1, "B")...)
	add(a, eventstore.Exact(1), events(3, "A")...)
	add(b, eventstore.Exact(0), events(1, "B")...)

	all := readAllN(t, s, len(want))
	if len(all) != len(want) {
		t.Fatalf("ReadAll from Start: %d events, want %d", len(all), len(want))
	}
	for i, r := range all {
		if r.ID != want[i].ID {
			t.Fatalf("ReadAll event %d is %s (%s@%d), want %s: sequential appends must keep their order", i, r.ID, r.Stream, r.Revision, want[i].ID)
		}
		if i > 0 && !all[i-1].Position.Less(r.Position) {
			t.Fatalf("ReadAll positions out of order: %s then %s", all[i-1].Position, r.Position)
		}
	}
	// The last event of each append is at the position the append reported.
	for i, n := range []int{1, 2, 5, 6} {
		if all[n].Position != results[i].Position {
			t.Errorf("append %d reported %s, its last event is at %s", i, results[i].Position, all[n].Position)
		}
	}

	t.Run("limit", func(t *testing.T) {
		got, err := s.ReadAll(ctxFor(t), eventstore.Start, 2)
		if err != nil || len(got) != 2 || got[0].ID != all[0].ID || got[1].ID != all[1].ID {
			t.Fatalf("ReadAll(Start, 2): %d events, %v; want the first two", len(got), err)
		}
		if got, err := s.ReadAll(ctxFor(t), eventstore.Start, 0); err != nil || len(got) != 0 {
			t.Fatalf("ReadAll(Start, 0): %d events, %v; want none", len(got), err)
		}
	})
	t.Run("after", func(t *testing.T) {
		for i := range all {
			got, err := s.ReadAll(ctxFor(t), all[i].Position, 2)
			if err != nil {
				t.Fatal(err)
			}
			wantN := min(2, len(all)-i-1)
			if len(got) != wantN {
				t.Fatalf("ReadAll after event %d: %d events, want %d", i, len(got), wantN)
			}
			for j, r := range got {
				if r.ID != all[i+1+j].ID {
					t.Fatalf("ReadAll after event %d: got %s, want %s", i, r.ID, all[i+1+j].ID)
				}
			}
		}
	})
	t.Run("every field", func(t *testing.T) {
		checkSame(t, a, 0, filter(all, a), append(want[0:2:2], want[3:6]...))
		checkSame(t, b, 0, filter(all, b), []eventstore.EventData{want[2], want[6]})
	})
}

// readAllFrom reads the global order after pos until it returns nothing.
func readAllFrom(t *testing.T, s eventstore.Store, pos eventstore.Position, batch int) []eventstore.RecordedEvent {
	t.Helper()
	var out []eventstore.RecordedEvent
	for {
		got, err := s.ReadAll(ctxFor(t), pos, batch)
		if err != nil {
			t.Fatalf("ReadAll after %s: %v", pos, err)
		}
		if len(got) == 0 {
			return out
		}
		out = append(out, got...)
		pos = got[len(got)-1].Position
	}
}

// readAllN reads the global order from the start until it has n events,
// waiting for them to become readable: ReadAll does not promise to return an
// event as soon as its append returns.
func readAllN(t *testing.T, s eventstore.Store, n int) []eventstore.RecordedEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []eventstore.RecordedEvent
	pos := eventstore.Start
	for len(out) < n {
		got, err := s.ReadAll(ctx, pos, n-len(out))
		if err != nil {
			t.Fatalf("ReadAll after %s (%d of %d events read): %v", pos, len(out), n, err)
		}
		if len(got) > 0 {
			out = append(out, got...)
			pos = got[len(got)-1].Position
			continue
		}
		if err := s.WaitForEvents(ctx, pos); err != nil {
			t.Fatalf("WaitForEvents after %s (%d of %d events read): %v", pos, len(out), n, err)
		}
	}
	if extra := readAllFrom(t, s, pos, 10); len(extra) > 0 {
		t.Fatalf("ReadAll: %d events more than the %d appended", len(extra), n)
	}
	return out
}

func filter(all []eventstore.RecordedEvent, stream string) []eventstore.RecordedEvent {
	var out []eventstore.RecordedEvent
	for _, r := range all {
		if r.Stream == stream {
			out = append(out, r)
		}
	}
	return out
}

func testIdempotentAppend(t *testing.T, s eventstore.Store) {
	stream := streamName("idem")
	first := events(2, "Happened")
	res := mustAppend(t, s, stream, eventstore.NoStream, first...)
	again := mustAppend(t, s, stream, eventstore.NoStream, first...)
	if again != res {
		t.Fatalf("re-append at NoStream: %+v, want the original %+v", again, res)
	}

	second := events(1, "Followed")
	res2 := mustAppend(t, s, stream, eventstore.Exact(1), second...)
	// The stream moved on, yet retrying either append is still a success.
	if again := mustAppend(t, s, stream, eventstore.Exact(1), second...); again != res2 {
		t.Fatalf("re-append at Exact(1): %+v, want the original %+v", again, res2)
	}
	if again := mustAppend(t, s, stream, eventstore.NoStream, first...); again != res {
		t.Fatalf("re-append at NoStream after more events: %+v, want the original %+v", again, res)
	}
	checkSame(t, stream, 0, mustRead(t, s, stream, 0), append(first, second...))
	if all := filter(readAllN(t, s, 3), stream); len(all) != 3 {
		t.Fatalf("ReadAll holds %d events of the stream, want 3", len(all))
	}
}

func testDuplicateEventID(t *testing.T, s eventstore.Store) {
	stream := streamName("dup")
	first := events(2, "Happened")
	mustAppend(t, s, stream, eventstore.NoStream, first...)

	changed := first[1]
	changed.Data = []byte(`{"n": "other"}`)
	tests := []struct {
		name     string
		stream   string
		expected eventstore.ExpectedRevision
		evs      []eventstore.EventData
	}{
		{"same ids other data", stream, eventstore.NoStream, []eventstore.EventData{first[0], changed}},
		{"same ids other type", stream, eventstore.NoStream, []eventstore.EventData{first[0], {ID: first[1].ID, Type: "Other", Data: first[1].Data, Metadata: first[1].Metadata}}},
		{"an id appended again after the stream's end", stream, eventstore.Exact(1), []eventstore.EventData{first[0]}},
		{"a stored id after a new one", stream, eventstore.Exact(1), []eventstore.EventData{event("New", `{}`), first[1]}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Append(ctxFor(t), tc.stream, tc.expected, tc.evs...)
			if !errors.Is(err, eventstore.ErrDuplicateEventID) {
				t.Fatalf("got %v, want ErrDuplicateEventID", err)
			}
		})
	}
	checkSame(t, stream, 0, mustRead(t, s, stream, 0), first)
}

// testEventIDPerStream: an event ID is unique within its stream, not across
// the store. The events of one stream appended to a second are written
// there, as its first events or after others (a condition that makes a
// store look for the IDs in the stream), alone or beside another stream in
// AppendMulti, and a retry of each is idempotent; the first stream is left
// as it was.
func testEventIDPerStream(t *testing.T, s eventstore.Store) {
	first, second, third := streamName("first"), streamName("second"), streamName("third")
	evs := events(2, "Happened")
	later := events(1, "Later")
	mustAppend(t, s, first, eventstore.NoStream, evs...)
	mustAppend(t, s, first, eventstore.Exact(1), later...)

	res := mustAppend(t, s, second, eventstore.NoStream, evs...)
	if again := mustAppend(t, s, second, eventstore.NoStream, evs...); again != res {
		t.Fatalf("re-append to %s: %+v, want the original %+v", second, again, res)
	}
	for _, expected := range []eventstore.ExpectedRevision{eventstore.Exact(1), eventstore.Any} {
		res := mustAppend(t, s, second, expected, later...)
		if again := mustAppend(t, s, second, expected, later...); again != res || res.NextRevision != 2 {
			t.Fatalf("append to %s at %v: %+v, again %+v; want revision 2 both times", second, expected, res, again)
		}
	}
	checkSame(t, second, 0, mustRead(t, s, second, 0), append(slices.Clone(evs), later...))

	beside := eventstore.StreamAppend{Stream: streamName("beside"), Expected: eventstore.NoStream, Events: events(1, "Beside")}
	reused := eventstore.StreamAppend{Stream: third, Expected: eventstore.NoStream, Events: evs}
	results := mustAppendMulti(t, s, beside, reused)
	checkWritten(t, s, beside, 0, results[0])
	checkWritten(t, s, reused, 0, results[1])
	if again := mustAppendMulti(t, s, reused); again[0].Err != nil || again[0].AppendResult != results[1].AppendResult {
		t.Fatalf("re-append to %s: %+v, want the original %+v", third, again[0], results[1])
	}
	checkSame(t, first, 0, mustRead(t, s, first, 0), append(slices.Clone(evs), later...))
	all := readAllN(t, s, 3+3+2+1)
	for stream, want := range map[string]int{first: 3, second: 3, third: 2} {
		if n := len(filter(all, stream)); n != want {
			t.Fatalf("ReadAll holds %d events of %s, want %d", n, stream, want)
		}
	}
}
