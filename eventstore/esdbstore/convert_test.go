package esdbstore

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/google/uuid"

	"github.com/reviewledger/reviewledger/eventstore"
)

const (
	id1 = "0b8e4c5e-3b0f-4d6a-9a43-1f6f1c7c0a01"
	id2 = "0b8e4c5e-3b0f-4d6a-9a43-1f6f1c7c0a02"
	id3 = "0b8e4c5e-3b0f-4d6a-9a43-1f6f1c7c0a03"
)

func TestExpectedRevision(t *testing.T) {
	tests := []struct {
		name string
		in   eventstore.ExpectedRevision
		want esdb.ExpectedRevision
	}{
		{"any", eventstore.Any, esdb.Any{}},
		{"no stream", eventstore.NoStream, esdb.NoStream{}},
		{"stream exists", eventstore.StreamExists, esdb.StreamExists{}},
		{"exact 0", eventstore.Exact(0), esdb.StreamRevision{Value: 0}},
		{"exact 41", eventstore.Exact(41), esdb.StreamRevision{Value: 41}},
		{"exact max", eventstore.Exact(^uint64(0)), esdb.StreamRevision{Value: ^uint64(0)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := expectedRevision(tc.in); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("expectedRevision(%s) = %#v, want %#v", tc.in, got, tc.want)
			}
		})
	}
}

func TestPositions(t *testing.T) {
	if got := allPosition(eventstore.Start); !reflect.DeepEqual(got, esdb.Start{}) {
		t.Fatalf("allPosition(Start) = %#v, want esdb.Start{}", got)
	}
	p := eventstore.Position{Commit: 1200, Prepare: 1100}
	if got := allPosition(p); !reflect.DeepEqual(got, esdb.Position{Commit: 1200, Prepare: 1100}) {
		t.Fatalf("allPosition(%s) = %#v", p, got)
	}
	if got := position(esdb.Position{Commit: 1200, Prepare: 1100}); got != p {
		t.Fatalf("position = %s, want %s", got, p)
	}
	// The server orders $all by commit position, then prepare position: the
	// port's Less must agree once mapped.
	ordered := []esdb.Position{{Commit: 10, Prepare: 10}, {Commit: 20, Prepare: 15}, {Commit: 20, Prepare: 20}, {Commit: 31, Prepare: 5}}
	for i := 1; i < len(ordered); i++ {
		a, b := position(ordered[i-1]), position(ordered[i])
		if !a.Less(b) || b.Less(a) {
			t.Fatalf("%s and %s out of order after mapping", a, b)
		}
	}
}

func TestIsSystem(t *testing.T) {
	for typ, want := range map[string]bool{"$metadata": true, "$>": true, "$statsCollected": true, "Submitted": false, "a$b": false, "": false} {
		if got := isSystem(typ); got != want {
			t.Errorf("isSystem(%q) = %v, want %v", typ, got, want)
		}
	}
}

func TestProposed(t *testing.T) {
	ok := eventstore.EventData{ID: id1, Type: "Submitted", Data: []byte(`{"a":1}`), Metadata: []byte(`{"schema":1}`)}
	invalid := []struct {
		name   string
		stream string
		evs    []eventstore.EventData
	}{
		{"empty stream", "", []eventstore.EventData{ok}},
		{"system stream", "$all", []eventstore.EventData{ok}},
		{"no events", "review-r1", nil},
		{"id not a uuid", "review-r1", []eventstore.EventData{{ID: "e1", Type: "Submitted"}}},
		{"empty id", "review-r1", []eventstore.EventData{{Type: "Submitted"}}},
		{"empty type", "review-r1", []eventstore.EventData{{ID: id1}}},
		{"system type", "review-r1", []eventstore.EventData{{ID: id1, Type: "$metadata"}}},
		{"id twice", "review-r1", []eventstore.EventData{ok, {ID: id1, Type: "Other"}}},
		{"id in upper case", "review-r1", []eventstore.EventData{{ID: "0B8E4C5E-3B0F-4D6A-9A43-1F6F1C7C0A01", Type: "Other"}}},
	}
	for _, tc := range invalid {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := proposed(tc.stream, tc.evs); !errors.Is(err, eventstore.ErrInvalidEvent) {
				t.Fatalf("got %v, want ErrInvalidEvent", err)
			}
		})
	}

	t.Run("converts", func(t *testing.T) {
		binary := eventstore.EventData{ID: id2, Type: "Blob", Data: []byte{0xff, 0x00}}
		empty := eventstore.EventData{ID: id3, Type: "Empty"}
		got, err := proposed("review-r1", []eventstore.EventData{ok, binary, empty})
		if err != nil {
			t.Fatal(err)
		}
		want := []esdb.EventData{
			{EventID: uuid.MustParse(id1), EventType: "Submitted", ContentType: esdb.ContentTypeJson, Data: ok.Data, Metadata: ok.Metadata},
			{EventID: uuid.MustParse(id2), EventType: "Blob", ContentType: esdb.ContentTypeBinary, Data: binary.Data},
			{EventID: uuid.MustParse(id3), EventType: "Empty", ContentType: esdb.ContentTypeBinary},
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("proposed:\n got %#v\nwant %#v", got, want)
		}
	})
}

func TestRecorded(t *testing.T) {
	created := time.Date(2026, 11, 30, 12, 0, 0, 0, time.FixedZone("CET", 3600))
	in := &esdb.RecordedEvent{
		EventID:      uuid.MustParse(id1),
		EventType:    "FindingReceived",
		StreamID:     "review-r1",
		EventNumber:  3,
		Position:     esdb.Position{Commit: 900, Prepare: 880},
		CreatedDate:  created,
		Data:         []byte(`{"state":"accepted"}`),
		UserMetadata: []byte{},
	}
	got := recorded(in)
	want := eventstore.RecordedEvent{
		ID:         id1,
		Stream:     "review-r1",
		Revision:   3,
		Position:   eventstore.Position{Commit: 900, Prepare: 880},
		Type:       "FindingReceived",
		Data:       []byte(`{"state":"accepted"}`),
		Metadata:   nil,
		RecordedAt: created.UTC(),
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("recorded:\n got %+v\nwant %+v", got, want)
	}
	if got.RecordedAt.Location() != time.UTC {
		t.Fatalf("RecordedAt in %s, want UTC", got.RecordedAt.Location())
	}
}

func rec(id string, rev uint64, typ, data string) eventstore.RecordedEvent {
	return eventstore.RecordedEvent{ID: id, Stream: "s", Revision: rev, Position: eventstore.Position{Commit: 100 + rev, Prepare: 100 + rev}, Type: typ, Data: []byte(data)}
}

func ev(id, typ, data string) eventstore.EventData {
	return eventstore.EventData{ID: id, Type: typ, Data: []byte(data)}
}

func TestMatchSlot(t *testing.T) {
	a, b := ev(id1, "A", `1`), ev(id2, "B", `2`)
	tests := []struct {
		name   string
		stored []eventstore.RecordedEvent
		events []eventstore.EventData
		want   slotMatch
	}{
		{"empty slot", nil, []eventstore.EventData{a}, slotFree},
		{"other events", []eventstore.RecordedEvent{rec(id3, 0, "C", `3`)}, []eventstore.EventData{a}, slotFree},
		{"same events", []eventstore.RecordedEvent{rec(id1, 0, "A", `1`), rec(id2, 1, "B", `2`)}, []eventstore.EventData{a, b}, slotSame},
		{"same in upper case", []eventstore.RecordedEvent{rec(id1, 0, "A", `1`)}, []eventstore.EventData{ev("0B8E4C5E-3B0F-4D6A-9A43-1F6F1C7C0A01", "A", `1`)}, slotSame},
		{"other data", []eventstore.RecordedEvent{rec(id1, 0, "A", `9`)}, []eventstore.EventData{a}, slotConflict},
		{"other type", []eventstore.RecordedEvent{rec(id1, 0, "Z", `1`)}, []eventstore.EventData{a}, slotConflict},
		{"other metadata", []eventstore.RecordedEvent{{ID: id1, Type: "A", Data: []byte(`1`), Metadata: []byte(`{}`)}}, []eventstore.EventData{a}, slotConflict},
		{"swapped", []eventstore.RecordedEvent{rec(id2, 0, "B", `2`), rec(id1, 1, "A", `1`)}, []eventstore.EventData{a, b}, slotConflict},
		{"partly stored", []eventstore.RecordedEvent{rec(id1, 0, "A", `1`)}, []eventstore.EventData{a, b}, slotConflict},
		{"second id only", []eventstore.RecordedEvent{rec(id3, 0, "C", `3`), rec(id2, 1, "B", `2`)}, []eventstore.EventData{a, b}, slotConflict},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := matchSlot(tc.stored, tc.events); got != tc.want {
				t.Fatalf("matchSlot = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestPlaced(t *testing.T) {
	// The stream holds A@0, B@1, C@2.
	stored := []eventstore.RecordedEvent{rec(id1, 0, "A", `1`), rec(id2, 1, "B", `2`), rec(id3, 2, "C", `3`)}
	fresh := ev("7d6f7f3e-1111-4b0a-8c55-5a2b8c9d0e01", "N", `0`)
	tests := []struct {
		name     string
		stored   []eventstore.RecordedEvent
		expected eventstore.ExpectedRevision
		events   []eventstore.EventData
		done     bool
		dup      bool
		wantRev  uint64
	}{
		{"new event", stored, eventstore.Exact(2), []eventstore.EventData{fresh}, false, false, 0},
		{"empty stream", nil, eventstore.Any, []eventstore.EventData{fresh}, false, false, 0},
		{"repeat at its place", stored, eventstore.Exact(0), []eventstore.EventData{ev(id2, "B", `2`), ev(id3, "C", `3`)}, true, false, 2},
		{"repeat at no stream", stored, eventstore.NoStream, []eventstore.EventData{ev(id1, "A", `1`)}, true, false, 0},
		{"repeat at any", stored, eventstore.Any, []eventstore.EventData{ev(id2, "B", `2`)}, true, false, 1},
		{"repeat at stream exists", stored, eventstore.StreamExists, []eventstore.EventData{ev(id3, "C", `3`)}, true, false, 2},
		{"id again after the end", stored, eventstore.Exact(2), []eventstore.EventData{ev(id1, "A", `1`)}, false, true, 0},
		{"id at another place", stored, eventstore.Exact(1), []eventstore.EventData{ev(id1, "A", `1`)}, false, true, 0},
		{"stored id after a new one", stored, eventstore.Exact(2), []eventstore.EventData{fresh, ev(id2, "B", `2`)}, false, true, 0},
		{"same id other data", stored, eventstore.Exact(0), []eventstore.EventData{ev(id2, "B", `other`)}, false, true, 0},
		{"runs past the end", stored, eventstore.Exact(1), []eventstore.EventData{ev(id3, "C", `3`), fresh}, false, true, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, done, err := placed("s", tc.expected, tc.stored, tc.events)
			if tc.dup {
				if !errors.Is(err, eventstore.ErrDuplicateEventID) {
					t.Fatalf("got %v, want ErrDuplicateEventID", err)
				}
				return
			}
			if err != nil || done != tc.done {
				t.Fatalf("placed: done %v, %v; want done %v", done, err, tc.done)
			}
			if done {
				want := eventstore.AppendResult{NextRevision: tc.wantRev, Position: tc.stored[tc.wantRev].Position}
				if res != want {
					t.Fatalf("result %+v, want %+v", res, want)
				}
			}
		})
	}
}

func TestSlotStart(t *testing.T) {
	tests := []struct {
		in    eventstore.ExpectedRevision
		want  uint64
		named bool
	}{
		{eventstore.NoStream, 0, true},
		{eventstore.Exact(0), 1, true},
		{eventstore.Exact(9), 10, true},
		{eventstore.Any, 0, false},
		{eventstore.StreamExists, 0, false},
	}
	for _, tc := range tests {
		got, named := slotStart(tc.in)
		if got != tc.want || named != tc.named {
			t.Errorf("slotStart(%s) = %d, %v; want %d, %v", tc.in, got, named, tc.want, tc.named)
		}
	}
}
