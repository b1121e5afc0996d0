package pgstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/pgstore/pgarray"
	"github.com/reviewledger/reviewledger/eventstore/storeerr"
)

// Expectation codes, as appendSQL's CASE reads them.
const (
	codeAny = iota
	codeNoStream
	codeStreamExists
	codeExact
)

// appendSQL appends events to a stream in one statement. Its first part
// moves the stream's head (event_stream) on by the number of events ($8) if
// the expected-revision condition holds: it inserts the head of a new
// stream, or updates the head of an existing one, under that row's lock,
// and it checks the condition against the row as last committed, so
// concurrent appends to one stream serialize there and the loser of a race
// writes nothing. The events are then inserted at the revisions up to the
// new head. The statement inserts nothing when the condition fails. An
// event ID is unique within its stream only (migration 0007): an append
// that may meet its own IDs in the stream is followed by checkIDsSQL in its
// transaction.
const appendSQL = `
WITH head AS (
	INSERT INTO event_stream AS h (stream, revision)
	SELECT $1, $8::bigint - 1
	WHERE CASE WHEN $6::int IN (2, 3) THEN EXISTS (SELECT 1 FROM event_stream WHERE stream = $1) ELSE true END
	ON CONFLICT (stream) DO UPDATE SET revision = h.revision + excluded.revision + 1
	WHERE CASE $6::int
		WHEN 1 THEN false
		WHEN 3 THEN h.revision = $7::bigint
		ELSE true
	END
	RETURNING h.revision
)
INSERT INTO event (stream, revision, id, type, data, metadata)
SELECT $1, head.revision - $8::bigint + e.ord, e.id, e.type, e.data, e.metadata
FROM head, unnest($2::text[]::uuid[], $3::text[], $4::bytea[], $5::bytea[]) WITH ORDINALITY AS e(id, type, data, metadata, ord)
RETURNING revision, xid::text::bigint, seq`

// appendOneSQL is appendSQL for a single event, the common case, without the
// arrays.
const appendOneSQL = `
WITH head AS (
	INSERT INTO event_stream AS h (stream, revision)
	SELECT $1, 0
	WHERE CASE WHEN $6::int IN (2, 3) THEN EXISTS (SELECT 1 FROM event_stream WHERE stream = $1) ELSE true END
	ON CONFLICT (stream) DO UPDATE SET revision = h.revision + 1
	WHERE CASE $6::int
		WHEN 1 THEN false
		WHEN 3 THEN h.revision = $7::bigint
		ELSE true
	END
	RETURNING h.revision
)
INSERT INTO event (stream, revision, id, type, data, metadata)
SELECT $1, head.revision, $2::uuid, $3, $4, $5
FROM head
RETURNING revision, xid::text::bigint, seq`

// checkIDsSQL fails with a unique violation of event_stream_id when one of
// the streams of $1 holds an event ID twice. It runs after the appends of
// its transaction, which hold their streams' heads: every earlier append to
// those streams has committed and is seen, and every later one waits. A
// stream's first append (NoStream) cannot meet its IDs in the stream and
// is not checked.
const checkIDsSQL = `SELECT event_ids_unique($1::text[])`

// idsTwice reports whether err is checkIDsSQL's unique violation.
func idsTwice(err error) bool {
	return storeerr.Code(err) == storeerr.CodeUniqueViolation && storeerr.Constraint(err) == "event_stream_id"
}

// maxAttempts bounds how often an append is retried after losing a race to
// an append that committed while it ran. Only conditions that still hold are
// retried (Any, StreamExists, or an Exact that became true), so this is
// reached only under extreme contention on one stream.
const maxAttempts = 20

// part is one stream's append, validated, with its condition coded as the
// statements read it.
type part struct {
	eventstore.StreamAppend
	code int
	rev  int64
}

// newPart codes the condition of a validated append.
func newPart(a eventstore.StreamAppend) (part, error) {
	p := part{StreamAppend: a, code: codeAny}
	switch n, exact := a.Expected.Exact(); {
	case exact:
		if n >= 1<<63-1 {
			return part{}, fmt.Errorf("append to %s: expected revision %d out of range: %w", a.Stream, n, eventstore.ErrInvalidEvent)
		}
		p.code, p.rev = codeExact, int64(n)
	case a.Expected.IsNoStream():
		p.code = codeNoStream
	case a.Expected.IsStreamExists():
		p.code = codeStreamExists
	}
	return p, nil
}

// Append implements eventstore.Store.
func (s *Store) Append(ctx context.Context, stream string, expected eventstore.ExpectedRevision, events ...eventstore.EventData) (eventstore.AppendResult, error) {
	if err := eventstore.ValidateAppend(stream, events); err != nil {
		return eventstore.AppendResult{}, err
	}
	p, err := newPart(eventstore.StreamAppend{Stream: stream, Expected: expected, Events: events})
	if err != nil {
		return eventstore.AppendResult{}, err
	}
	return s.appendStream(ctx, p, nil)
}

// appendStream appends one stream's events, each attempt in a transaction
// of its own followed by the statements of then, and signals readers when
// it wrote. Its errors are Append's, and ErrStatement.
func (s *Store) appendStream(ctx context.Context, p part, then []Statement) (eventstore.AppendResult, error) {
	stream, expected, events := p.Stream, p.Expected, p.Events
	for attempt := 1; ; attempt++ {
		res, inserted, err := s.insert(ctx, p, then)
		if err == nil && inserted {
			s.signal()
			return res, nil
		}
		if errors.Is(err, ErrStatement) {
			return eventstore.AppendResult{}, err
		}
		collided := idsTwice(err)
		if err != nil && !collided {
			return eventstore.AppendResult{}, storeerr.Wrap(ctx, "append to "+stream, err)
		}
		// The condition failed, a concurrent append took the revisions, or
		// an ID is in the stream already: perhaps this very append, retried.
		if res, ok, err := s.idempotent(ctx, stream, expected, events); ok || err != nil {
			return res, err
		}
		if collided {
			// An ID of the stream again, and not as this append.
			return eventstore.AppendResult{}, fmt.Errorf("append to %s: %w", stream, eventstore.ErrDuplicateEventID)
		}
		exists, actual, err := s.current(ctx, stream)
		if err != nil {
			return eventstore.AppendResult{}, err
		}
		if !expected.Satisfied(exists, actual) || attempt == maxAttempts {
			return eventstore.AppendResult{}, &eventstore.WrongExpectedVersionError{Stream: stream, Expected: expected, Exists: exists, Actual: actual}
		}
		// The condition holds now: an append we raced committed between our
		// snapshot and our insert. Try again.
	}
}

// insert runs the append statement for p, then the statements of then in
// the same implicit transaction (one pipeline). It reports whether the
// events were inserted. A failing statement is ErrStatement; every other
// error is the driver's, for the caller to classify. When the events' seq
// had no partition, it creates the partitions ahead and runs again (more
// than once only when concurrent appends outran those too).
func (s *Store) insert(ctx context.Context, p part, then []Statement) (eventstore.AppendResult, bool, error) {
	res, inserted, err := s.insertOnce(ctx, p, then)
	for attempt := 1; noPartition(err) && attempt < maxAttempts; attempt++ {
		if _, gerr := s.EnsurePartitions(ctx, ahead(attempt)); gerr != nil {
			return eventstore.AppendResult{}, false, gerr
		}
		res, inserted, err = s.insertOnce(ctx, p, then)
	}
	return res, inserted, err
}

func (s *Store) insertOnce(ctx context.Context, p part, then []Statement) (eventstore.AppendResult, bool, error) {
	sql, args := insertQuery(p)
	var (
		res      eventstore.AppendResult
		inserted bool
	)
	err := s.pipeline(ctx, sql, args, checked(p), then, func(rows pgx.Rows) (err error) {
		res, inserted, err = collectInsert(rows)
		return err
	})
	return res, inserted, err
}

// checked returns the streams of parts whose append checkIDsSQL checks:
// all but a stream's first (NoStream).
func checked(parts ...part) []string {
	var streams []string
	for _, p := range parts {
		if p.code != codeNoStream {
			streams = append(streams, p.Stream)
		}
	}
	return streams
}

// pipeline runs an append statement, sql with args, whose rows collect
// reads; then checkIDsSQL on the streams of check, if any; then the
// statements of then: one round trip and one implicit transaction (a
// pgx.Batch sent as one pipeline), or a plain query when the statement is
// alone. The check's unique violation is returned as the driver gave it
// (idsTwice), a failing statement of then as ErrStatement.
func (s *Store) pipeline(ctx context.Context, sql string, args []any, check []string, then []Statement, collect func(pgx.Rows) error) error {
	if len(check) == 0 && len(then) == 0 {
		rows, _ := s.pool.Query(ctx, sql, args...)
		return collect(rows)
	}
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	if len(check) > 0 {
		b.Queue(checkIDsSQL, check)
	}
	queue(b, then)
	br := s.pool.SendBatch(ctx, b)
	rows, _ := br.Query()
	err := collect(rows)
	if err == nil && len(check) > 0 {
		_, err = br.Exec()
	}
	if err == nil {
		err = execStatements(ctx, br, len(then))
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

func insertQuery(p part) (string, []any) {
	events := p.Events
	if len(events) == 1 {
		e := events[0]
		return appendOneSQL, []any{p.Stream, e.ID, e.Type, nonNil(e.Data), nonNil(e.Metadata), p.code, p.rev}
	}
	ids := make(pgarray.Text, len(events))
	types := make(pgarray.Text, len(events))
	data := make(pgarray.Bytes, len(events))
	meta := make(pgarray.Bytes, len(events))
	for i, e := range events {
		ids[i], types[i], data[i], meta[i] = e.ID, e.Type, e.Data, e.Metadata // nil is sent empty
	}
	return appendSQL, []any{p.Stream, ids, types, data, meta, p.code, p.rev, int64(len(events))}
}

// collectInsert reads the rows an append statement returned: the result of
// its last event, and whether it inserted any.
func collectInsert(rows pgx.Rows) (eventstore.AppendResult, bool, error) {
	var (
		res      eventstore.AppendResult
		inserted bool
		revision int64
		xid      int64
		seq      int64
	)
	_, err := pgx.ForEachRow(rows, []any{&revision, &xid, &seq}, func() error {
		if !inserted || uint64(revision) > res.NextRevision {
			res = eventstore.AppendResult{NextRevision: uint64(revision), Position: eventstore.Position{Commit: uint64(xid), Prepare: uint64(seq)}}
		}
		inserted = true
		return nil
	})
	return res, inserted, err
}

// idempotent reports whether events are already stored exactly where
// expected would have put them, and returns the original result if so. It
// returns ErrDuplicateEventID when some of the IDs are stored in the stream
// as anything else, and false when none is.
func (s *Store) idempotent(ctx context.Context, stream string, expected eventstore.ExpectedRevision, events []eventstore.EventData) (eventstore.AppendResult, bool, error) {
	rows, _ := s.pool.Query(ctx, selectByID, []string{stream}, eventIDs(events))
	stored, err := collectEvents(rows)
	if err != nil {
		return eventstore.AppendResult{}, false, storeerr.Wrap(ctx, "append to "+stream, err)
	}
	return placed(stream, expected, events, byID(stored))
}

// selectByID reads the stored events of the streams of $1 with the IDs of
// $2, through each partition's index by stream: a stream's few rows, not
// an index of every ID. It may return an ID of $2 stored in another stream
// of $1 too; byID keeps each in its own.
const selectByID = selectEvents + ` WHERE stream = ANY($1::text[]) AND id = ANY($2::text[]::uuid[])`

func eventIDs(events []eventstore.EventData) []string {
	ids := make([]string, len(events))
	for i, e := range events {
		ids[i] = e.ID
	}
	return ids
}

// eventKey is an event ID within its stream, which is where it is unique.
type eventKey struct{ stream, id string }

func byID(stored []eventstore.RecordedEvent) map[eventKey]eventstore.RecordedEvent {
	m := make(map[eventKey]eventstore.RecordedEvent, len(stored))
	for _, r := range stored {
		m[eventKey{r.Stream, r.ID}] = r
	}
	return m
}

// placed decides an append from the stored events with its IDs (stored may
// hold others too): the original result when all of them are stored in the
// stream where expected puts them, ErrDuplicateEventID when any is stored
// in it otherwise, and false when none is.
func placed(stream string, expected eventstore.ExpectedRevision, events []eventstore.EventData, stored map[eventKey]eventstore.RecordedEvent) (eventstore.AppendResult, bool, error) {
	first, ok := stored[eventKey{stream, events[0].ID}]
	if !ok {
		for _, e := range events[1:] {
			if _, ok := stored[eventKey{stream, e.ID}]; ok {
				return eventstore.AppendResult{}, false, fmt.Errorf("append to %s: %w", stream, eventstore.ErrDuplicateEventID)
			}
		}
		return eventstore.AppendResult{}, false, nil
	}
	dup := fmt.Errorf("append to %s: %w", stream, eventstore.ErrDuplicateEventID)
	if n, exact := expected.Exact(); exact && first.Revision != n+1 || expected.IsNoStream() && first.Revision != 0 {
		return eventstore.AppendResult{}, false, dup
	}
	var last eventstore.RecordedEvent
	for i, e := range events {
		r, ok := stored[eventKey{stream, e.ID}]
		if !ok || r.Revision != first.Revision+uint64(i) ||
			r.Type != e.Type || !bytes.Equal(r.Data, e.Data) || !bytes.Equal(r.Metadata, e.Metadata) {
			return eventstore.AppendResult{}, false, dup
		}
		last = r
	}
	return eventstore.AppendResult{NextRevision: last.Revision, Position: last.Position}, true, nil
}

// current returns whether stream has events and the revision of its last,
// from its head.
func (s *Store) current(ctx context.Context, stream string) (bool, uint64, error) {
	var last *int64
	if err := s.pool.QueryRow(ctx, `SELECT max(revision) FROM event_stream WHERE stream = $1`, stream).Scan(&last); err != nil {
		return false, 0, storeerr.Wrap(ctx, "append to "+stream, err)
	}
	if last == nil {
		return false, 0, nil
	}
	return true, uint64(*last), nil
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
