package pgstore_test

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/eventstoretest"
	"github.com/reviewledger/reviewledger/eventstore/pgstore"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// TestReadsInEitherFormat reads the same events through a pool on the
// extended protocol (bodies in binary format, read by the reusing scanner)
// and one on the simple protocol (every column in text format, read row by
// row by pgx's own scan), and wants the same events from both: bodies and
// metadata empty, large and with every byte value, types repeated and new.
func TestReadsInEitherFormat(t *testing.T) {
	t.Parallel()
	url := dbtest.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	open := func(mode pgx.QueryExecMode) *pgstore.Store {
		s := pgstore.New(dbtest.PoolOn(t, url, dbtest.ExecMode(mode)), pgstore.Config{})
		t.Cleanup(s.Close)
		return s
	}
	binary, text := open(pgx.QueryExecModeCacheStatement), open(pgx.QueryExecModeSimpleProtocol)

	every := make([]byte, 256)
	for i := range every {
		every[i] = byte(i)
	}
	bodies := []struct {
		typ        string
		data, meta []byte
	}{
		{"Submitted", []byte(`{"review_id":"a"}`), []byte(`{"actor":"platform"}`)},
		{"Submitted", nil, nil},
		{"Décidé", []byte(strings.Repeat("x", 70_000)), nil},
		{"Submitted", every, every[:1]},
		{"AttemptStarted", []byte(`{}`), []byte(`{"hash":"ab"}`)},
	}
	for i, b := range bodies {
		stream := []string{"review-a", "review-b"}[i%2]
		if _, err := binary.Append(ctx, stream, eventstore.Any, eventstore.EventData{ID: eventstoretest.NewID(), Type: b.typ, Data: b.data, Metadata: b.meta}); err != nil {
			t.Fatal(err)
		}
	}
	read := func(s *pgstore.Store) []eventstore.RecordedEvent {
		for {
			got, err := s.ReadAll(ctx, eventstore.Start, 100)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) == len(bodies) {
				return got
			}
			if err := s.WaitForEvents(ctx, eventstore.Start); err != nil {
				t.Fatal(err)
			}
		}
	}
	fromBinary, fromText := read(binary), read(text)
	if !reflect.DeepEqual(fromBinary, fromText) {
		t.Fatalf("ReadAll differs by format:\nbinary %+v\ntext   %+v", fromBinary, fromText)
	}
	for i, e := range fromBinary {
		b := bodies[i]
		if e.Type != b.typ || string(e.Data) != string(b.data) || string(e.Metadata) != string(b.meta) {
			t.Errorf("event %d: read %q %q %q, appended %q %q %q", i, e.Type, e.Data, e.Metadata, b.typ, b.data, b.meta)
		}
		if e.Data == nil || e.Metadata == nil {
			t.Errorf("event %d: a nil body or metadata; an empty one is read as empty, not nil", i)
		}
	}
	// The body and the metadata share one copy: growing the body must not
	// write into the metadata.
	first := fromBinary[0]
	meta := string(first.Metadata)
	_ = append(first.Data, "!!!!"...)
	if string(first.Metadata) != meta {
		t.Fatalf("appending to the body changed the metadata to %q", first.Metadata)
	}
	stream, err := binary.ReadStream(ctx, "review-a", 0)
	if err != nil {
		t.Fatal(err)
	}
	streamText, err := text.ReadStream(ctx, "review-a", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(stream) != 3 || !reflect.DeepEqual(stream, streamText) {
		t.Fatalf("ReadStream differs by format or is short:\nbinary %+v\ntext   %+v", stream, streamText)
	}
}

// TestHeadReadsTheEndOfTheIndex: Head reads from the end of the index on
// xid of each partition, merged, sorting the last transaction's rows by
// seq, not a sort of the table (a bare "ORDER BY xid" named the output
// column, the bigint cast, and cost a sort of every event: 450 ms at a
// million reviews). The plan is checked with sequential scans off, as a
// large table would plan it.
func TestHeadReadsTheEndOfTheIndex(t *testing.T) {
	pool := dbtest.Pool(t)
	conn := planner(t, pool)
	checkMergedScans(t, conn, dbtest.Explain(t, conn, pgstore.HeadSQL), "Index Scan Backward using {p}_xid_idx on {p} ")
}

// planner returns a connection of pool with sequential scans off, as a
// large table would plan its statements, released when t ends.
func planner(t *testing.T, pool *pgxpool.Pool) *pgxpool.Conn {
	t.Helper()
	conn, err := pool.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	if _, err := conn.Exec(context.Background(), `SET enable_seqscan = off`); err != nil {
		t.Fatal(err)
	}
	return conn
}

// execAll runs each statement on pool in turn.
func execAll(t *testing.T, pool *pgxpool.Pool, statements ...string) {
	t.Helper()
	for _, sql := range statements {
		if _, err := pool.Exec(context.Background(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}

// checkMergedScans checks that plan reads every partition of event by one
// scan of its index on xid, as scan describes ({p} standing for the
// partition's name), merged in xid order, and sorts no more than the rows
// of one transaction at a time: the one sort is incremental, its rows
// presorted by xid, so that a transaction's events are ordered by seq.
func checkMergedScans(t *testing.T, conn *pgxpool.Conn, plan []string, scan string) {
	t.Helper()
	rows, _ := conn.Query(context.Background(), `SELECT name FROM event_partition ORDER BY upper`)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(plan, "\n")
	sorts := 0
	for i, line := range plan {
		if !strings.Contains(line, "Sort") || strings.Contains(line, "Sort Key") {
			continue
		}
		sorts++
		if !strings.HasSuffix(line, "->  Incremental Sort") || i+2 >= len(plan) ||
			strings.TrimSpace(plan[i+2]) != "Presorted Key: event.xid" || sorts > 1 {
			t.Fatalf("plan:\n%s\nsorts (%q), not one transaction at a time", text, line)
		}
	}
	if len(names) < 2 || !strings.Contains(text, "Merge Append") {
		t.Fatalf("plan:\n%s\nwant the %d partitions %v merged", text, len(names), names)
	}
	for _, name := range names {
		if want := strings.ReplaceAll(scan, "{p}", name); strings.Count(text, want) != 1 {
			t.Fatalf("plan:\n%s\nwant one %q", text, want)
		}
	}
}

// TestStreamsInPages: Streams lists the streams of a prefix that have
// events, each once, in name order, a page of limit names after the one
// given; a limit of 0 lists them all.
func TestStreamsInPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := pgstore.New(dbtest.Pool(t), pgstore.Config{})
	t.Cleanup(s.Close)
	for _, name := range []string{"p-c", "q-a", "p-a", "p-e", "p-b", "pq-x", "p-d"} {
		evs := []eventstore.EventData{
			{ID: eventstoretest.NewID(), Type: "T", Data: []byte(`{}`)},
			{ID: eventstoretest.NewID(), Type: "T", Data: []byte(`{}`)},
		}
		if _, err := s.Append(ctx, name, eventstore.NoStream, evs...); err != nil {
			t.Fatal(err)
		}
	}
	all, err := s.Streams(ctx, "p-", "", 0)
	if want := []string{"p-a", "p-b", "p-c", "p-d", "p-e"}; err != nil || !slices.Equal(all, want) {
		t.Fatalf("Streams of p- with no limit: %v, %v; want %v", all, err, want)
	}
	var paged [][]string
	for after := ""; ; {
		page, err := s.Streams(ctx, "p-", after, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		paged = append(paged, page)
		after = page[len(page)-1]
	}
	if want := [][]string{{"p-a", "p-b"}, {"p-c", "p-d"}, {"p-e"}}; !reflect.DeepEqual(paged, want) {
		t.Fatalf("Streams of p- in pages of 2: %v, want %v", paged, want)
	}
}
