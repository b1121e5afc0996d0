package eventstoretest

import (
	"errors"
	"testing"

	"github.com/reviewledger/reviewledger/eventstore"
)

// expectedAt is the condition of an append to a stream holding next events.
func expectedAt(next uint64) eventstore.ExpectedRevision {
	if next == 0 {
		return eventstore.NoStream
	}
	return eventstore.Exact(next - 1)
}

func mustAppendMulti(t *testing.T, s eventstore.Store, appends ...eventstore.StreamAppend) []eventstore.StreamResult {
	t.Helper()
	results, err := s.AppendMulti(ctxFor(t), appends...)
	if err != nil {
		t.Fatalf("append to %d streams: %v", len(appends), err)
	}
	if len(results) != len(appends) {
		t.Fatalf("append to %d streams: %d results", len(appends), len(results))
	}
	return results
}

// checkWritten fails unless result reports a's events as stored at
// revisions first on, and they are.
func checkWritten(t *testing.T, s eventstore.Store, a eventstore.StreamAppend, first uint64, result eventstore.StreamResult) {
	t.Helper()
	if result.Err != nil {
		t.Fatalf("%s at %s: %v, want success", a.Stream, a.Expected, result.Err)
	}
	got := mustRead(t, s, a.Stream, first)
	if len(got) > len(a.Events) { // the stream moved on since
		got = got[:len(a.Events)]
	}
	checkSame(t, a.Stream, first, got, a.Events)
	if last := got[len(got)-1]; result.NextRevision != last.Revision || result.Position != last.Position {
		t.Fatalf("%s: result %+v, its last event is revision %d at %s", a.Stream, result.AppendResult, last.Revision, last.Position)
	}
}

// testMultiMixed appends to streams some of which fail their check in one
// call: exactly the others are written, each failure names its stream, what
// it expected and what it found.
func testMultiMixed(t *testing.T, s eventstore.Store) {
	atOne, atZero, taken, anyOld := streamName("at-one"), streamName("at-zero"), streamName("taken"), streamName("any")
	mustAppend(t, s, atOne, eventstore.NoStream, events(2, "Before")...)
	mustAppend(t, s, atZero, eventstore.NoStream, events(1, "Before")...)
	mustAppend(t, s, taken, eventstore.NoStream, events(1, "Before")...)
	mustAppend(t, s, anyOld, eventstore.NoStream, events(3, "Before")...)

	tests := []struct {
		append eventstore.StreamAppend
		ok     bool
		// first revision written when ok; the stream's state otherwise
		first  uint64
		exists bool
		actual uint64
	}{
		{eventstore.StreamAppend{Stream: atOne, Expected: eventstore.Exact(1), Events: events(2, "Right")}, true, 2, true, 0},
		{eventstore.StreamAppend{Stream: atZero, Expected: eventstore.Exact(4), Events: events(1, "Wrong")}, false, 0, true, 0},
		{eventstore.StreamAppend{Stream: taken, Expected: eventstore.NoStream, Events: events(1, "Wrong")}, false, 0, true, 0},
		{eventstore.StreamAppend{Stream: streamName("fresh"), Expected: eventstore.NoStream, Events: events(3, "New")}, true, 0, false, 0},
		{eventstore.StreamAppend{Stream: streamName("missing"), Expected: eventstore.StreamExists, Events: events(1, "Wrong")}, false, 0, false, 0},
		{eventstore.StreamAppend{Stream: anyOld, Expected: eventstore.Any, Events: events(1, "Any")}, true, 3, true, 0},
		{eventstore.StreamAppend{Stream: streamName("absent"), Expected: eventstore.Exact(0), Events: events(2, "Wrong")}, false, 0, false, 0},
	}
	appends := make([]eventstore.StreamAppend, len(tests))
	for i, tc := range tests {
		appends[i] = tc.append
	}
	results := mustAppendMulti(t, s, appends...)

	total := 2 + 1 + 1 + 3 // written before
	for i, tc := range tests {
		a := tc.append
		if tc.ok {
			checkWritten(t, s, a, tc.first, results[i])
			total += len(a.Events)
			continue
		}
		checkWrongVersion(t, results[i].Err, a.Stream, a.Expected, tc.exists, tc.actual)
		got, err := s.ReadStream(ctxFor(t), a.Stream, 0)
		switch {
		case tc.exists && (err != nil || got[len(got)-1].Revision != tc.actual):
			t.Fatalf("%s after its failed check: %d events, %v; want it unchanged at revision %d", a.Stream, len(got), err, tc.actual)
		case !tc.exists && !errors.Is(err, eventstore.ErrStreamNotFound):
			t.Fatalf("%s after its failed check: %d events, %v; want ErrStreamNotFound", a.Stream, len(got), err)
		}
	}
	all := readAllN(t, s, total)
	for _, tc := range tests {
		n := len(filter(all, tc.append.Stream))
		want := int(tc.first) + len(tc.append.Events)
		if !tc.ok {
			want = 0
			if tc.exists {
				want = int(tc.actual) + 1
			}
		}
		if n != want {
			t.Fatalf("ReadAll holds %d events of %s, want %d", n, tc.append.Stream, want)
		}
	}
}

// testMultiIdempotent repeats a call: every stream it wrote succeeds again
// with its original result, a stream it refused is refused again, and
// nothing is written twice, also after the streams moved on.
func testMultiIdempotent(t *testing.T, s eventstore.Store) {
	existing, anyOld := streamName("existing"), streamName("any")
	mustAppend(t, s, existing, eventstore.NoStream, events(2, "Before")...)
	mustAppend(t, s, anyOld, eventstore.NoStream, events(1, "Before")...)
	appends := []eventstore.StreamAppend{
		{Stream: streamName("new"), Expected: eventstore.NoStream, Events: events(2, "New")},
		{Stream: existing, Expected: eventstore.Exact(1), Events: events(1, "Next")},
		{Stream: streamName("refused"), Expected: eventstore.StreamExists, Events: events(1, "Refused")},
		{Stream: anyOld, Expected: eventstore.Any, Events: events(2, "Any")},
	}
	firsts := []uint64{0, 2, 0, 1}
	check := func(label string, results, original []eventstore.StreamResult) {
		t.Helper()
		for i, a := range appends {
			if i == 2 {
				checkWrongVersion(t, results[i].Err, a.Stream, a.Expected, false, 0)
				continue
			}
			checkWritten(t, s, a, firsts[i], results[i])
			if original != nil && results[i].AppendResult != original[i].AppendResult {
				t.Fatalf("%s: %s: %+v, want the original %+v", label, a.Stream, results[i].AppendResult, original[i].AppendResult)
			}
		}
	}
	original := mustAppendMulti(t, s, appends...)
	check("first call", original, nil)
	check("same call again", mustAppendMulti(t, s, appends...), original)
	// Without its Any part, whose condition holds whatever the stream's
	// state, no condition of the repeated call holds: a backend may find the
	// repeats another way then.
	results := mustAppendMulti(t, s, appends[:3]...)
	check("same call without its Any part", append(results, original[3]), original)

	// The streams move on; repeating the call still changes nothing.
	mustAppend(t, s, existing, eventstore.Exact(2), events(1, "Later")...)
	mustAppend(t, s, anyOld, eventstore.Any, events(1, "Later")...)
	check("same call after more events", mustAppendMulti(t, s, appends...), original)

	lengths := map[string]int{appends[0].Stream: 2, existing: 4, anyOld: 4}
	for stream, n := range lengths {
		if got := mustRead(t, s, stream, 0); len(got) != n {
			t.Fatalf("%s holds %d events, want %d", stream, len(got), n)
		}
	}
	if _, err := s.ReadStream(ctxFor(t), appends[2].Stream, 0); !errors.Is(err, eventstore.ErrStreamNotFound) {
		t.Fatalf("refused stream: %v, want ErrStreamNotFound", err)
	}
	readAllN(t, s, 2+4+4)
}

// testMultiDuplicateEventID reuses a stream's stored event IDs for other
// content or in other places of it within a call: that stream alone is
// ErrDuplicateEventID, the other stream of the call is written.
func testMultiDuplicateEventID(t *testing.T, s eventstore.Store) {
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
		{"an id appended again after the stream's end", stream, eventstore.Exact(1), []eventstore.EventData{first[0]}},
		{"a stored id after a new one", stream, eventstore.Exact(1), []eventstore.EventData{event("New", `{}`), first[1]}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			beside := eventstore.StreamAppend{Stream: streamName("beside"), Expected: eventstore.NoStream, Events: events(2, "Beside")}
			results := mustAppendMulti(t, s,
				beside,
				eventstore.StreamAppend{Stream: tc.stream, Expected: tc.expected, Events: tc.evs},
			)
			if !errors.Is(results[1].Err, eventstore.ErrDuplicateEventID) {
				t.Fatalf("%s: got %v, want ErrDuplicateEventID", tc.stream, results[1].Err)
			}
			checkWritten(t, s, beside, 0, results[0])
		})
	}
	checkSame(t, stream, 0, mustRead(t, s, stream, 0), first)
}

// testMultiInvalid: invalid calls fail as a whole and write nothing, not
// even their valid streams.
func testMultiInvalid(t *testing.T, s eventstore.Store) {
	valid := func() eventstore.StreamAppend {
		return eventstore.StreamAppend{Stream: streamName("valid"), Expected: eventstore.NoStream, Events: events(1, "Valid")}
	}
	one := func(stream string, evs ...eventstore.EventData) eventstore.StreamAppend {
		return eventstore.StreamAppend{Stream: stream, Expected: eventstore.Any, Events: evs}
	}
	twice, shared := streamName("twice"), event("Shared", `{}`)
	tests := map[string][]eventstore.StreamAppend{
		"no streams":                  nil,
		"a stream twice":              {one(twice, event("A", `{}`)), valid(), one(twice, event("B", `{}`))},
		"a stream without events":     {valid(), one(streamName("empty"))},
		"an unnamed stream":           {valid(), one("", event("A", `{}`))},
		"an event without a type":     {valid(), one(streamName("untyped"), eventstore.EventData{ID: NewID(), Data: []byte(`{}`)})},
		"a malformed event id":        {valid(), one(streamName("malformed"), eventstore.EventData{ID: "not-a-uuid", Type: "A"})},
		"an event id twice in a part": {valid(), one(streamName("repeat"), shared, shared)},
		"an event id in two streams":  {one(streamName("left"), shared), one(streamName("right"), shared)},
	}
	for name, appends := range tests {
		t.Run(name, func(t *testing.T) {
			results, err := s.AppendMulti(ctxFor(t), appends...)
			if !errors.Is(err, eventstore.ErrInvalidEvent) || results != nil {
				t.Fatalf("got %d results, %v; want ErrInvalidEvent", len(results), err)
			}
			for _, a := range appends {
				if a.Stream == "" {
					continue
				}
				if got, err := s.ReadStream(ctxFor(t), a.Stream, 0); !errors.Is(err, eventstore.ErrStreamNotFound) {
					t.Fatalf("%s after an invalid call: %d events, %v; want ErrStreamNotFound", a.Stream, len(got), err)
				}
			}
		})
	}
	if got := readAllFrom(t, s, eventstore.Start, 10); len(got) != 0 {
		t.Fatalf("ReadAll after invalid calls only: %d events, want none", len(got))
	}
}
