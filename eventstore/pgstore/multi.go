package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/pgstore/pgarray"
	"github.com/reviewledger/reviewledger/eventstore/storeerr"
)

// Statement is SQL run in the transaction of an AppendMultiWith.
type Statement struct {
	SQL  string
	Args []any
}

// ErrStatement is returned when a statement of an AppendMultiWith fails:
// nothing of the transaction it ran in is written.
var ErrStatement = errors.New("statement of the append failed")

// appendMultiSQL appends to several streams in one statement, as
// appendSQL does for one. $1-$3 are the streams with their expectation
// codes and revisions, $10 their numbers of events; $4-$9 their events,
// flattened: the stream's index (1-based) and the event's ordinal in it,
// then the event. Each stream's head is moved on when its condition holds,
// in the order of the arrays (so two calls sharing streams lock their heads
// in the same order); the events of the streams whose head moved are
// inserted, in the order of the arrays, so seq follows it. ON CONFLICT's
// WHERE sees only the head row and the proposed one, so it finds the
// stream's condition in the arrays by name. The existing heads are looked
// up by one index probe each (LATERAL … LIMIT 1, which the planner does not
// turn into a hash of the whole table: an EXISTS in the select list became
// one, a scan of every head for each call, 5 times slower at 100,000
// reviews). The streams that may meet their own IDs are checked after it,
// in its transaction (checkIDsSQL).
const appendMultiSQL = `
WITH head AS (
	INSERT INTO event_stream AS h (stream, revision)
	SELECT want.stream, want.n - 1
	FROM unnest($1::text[], $2::int[], $10::bigint[]) WITH ORDINALITY AS want(stream, code, n, i)
		LEFT JOIN LATERAL (SELECT true AS found FROM event_stream s WHERE s.stream = want.stream LIMIT 1) AS cur ON true
	WHERE want.code NOT IN (2, 3) OR cur.found
	ORDER BY want.i
	ON CONFLICT (stream) DO UPDATE SET revision = h.revision + excluded.revision + 1
	WHERE CASE ($2::int[])[array_position($1::text[], excluded.stream)]
		WHEN 1 THEN false
		WHEN 3 THEN h.revision = ($3::bigint[])[array_position($1::text[], excluded.stream)]
		ELSE true
	END
	RETURNING h.stream, h.revision
)
INSERT INTO event (stream, revision, id, type, data, metadata)
SELECT head.stream, head.revision - ($10::bigint[])[e.i] + e.ord, e.id, e.type, e.data, e.metadata
FROM unnest($4::bigint[], $5::bigint[], $6::text[]::uuid[], $7::text[], $8::bytea[], $9::bytea[]) WITH ORDINALITY AS e(i, ord, id, type, data, metadata, n)
	JOIN head ON head.stream = ($1::text[])[e.i]
ORDER BY e.n
RETURNING stream, revision, xid::text::bigint, seq`

// AppendMulti implements eventstore.Store. It is AppendMultiWith without
// statements.
func (s *Store) AppendMulti(ctx context.Context, appends ...eventstore.StreamAppend) ([]eventstore.StreamResult, error) {
	return s.AppendMultiWith(ctx, appends)
}

// AppendMultiWith is AppendMulti, and runs then in the same transaction,
// after the events are inserted, in the same round trip (a pgx.Batch sent as
// one pipeline is one implicit transaction). The inserted events are visible to
// the statements. Each statement must make its changes conditional on its
// stream's append having succeeded, by testing for that stream's event IDs
// in it (e.g. `… WHERE EXISTS (SELECT 1 FROM event WHERE stream = $1 AND
// id = $2::uuid AND xid = pg_current_xact_id())`), and must be
// idempotent: when the combined insert cannot run as one (a race on a stream),
// pgstore appends the streams one by one, each in its own transaction followed
// by every statement of then. A failing statement fails the whole call
// (call-level error; nothing of that transaction is written, though the
// streams appended one by one before it are: any subset of the call may
// be stored after a call-level error, as the port says).
//
// The common case is one statement: every stream's condition checked and
// its events inserted by appendMultiSQL, in one transaction, so all the rows
// of the call share one transaction ID. Streams it did not write are
// resolved as Append resolves a failed insert: an idempotent re-append
// returns its original result, an ID stored elsewhere in its stream is
// ErrDuplicateEventID, a failed condition is *WrongExpectedVersionError, and
// a condition that holds by now (an append raced it) is appended again on
// its own. When the statement fails its check of the IDs (a stream holds
// one of its IDs twice: this call retried, or an ID reused) or meets a
// deadlock, it wrote nothing, and the streams are appended one by one as
// Append does.
// The call-level error of a failing statement matches ErrStatement; a
// connection lost meanwhile is eventstore.ErrUnavailable, as everywhere.
func (s *Store) AppendMultiWith(ctx context.Context, appends []eventstore.StreamAppend, then ...Statement) ([]eventstore.StreamResult, error) {
	if err := eventstore.ValidateAppendMulti(appends); err != nil {
		return nil, err
	}
	parts := make([]part, len(appends))
	for i, a := range appends {
		p, err := newPart(a)
		if err != nil {
			return nil, err
		}
		parts[i] = p
	}
	if len(parts) == 1 {
		return s.appendEach(ctx, parts, then)
	}
	written, err := s.insertAll(ctx, parts, then)
	if idsTwice(err) || storeerr.Code(err) == storeerr.CodeDeadlockDetected {
		return s.appendEach(ctx, parts, then)
	}
	if err != nil {
		return nil, multiErr(ctx, err)
	}
	if len(written) > 0 {
		s.signal()
	}
	if s.afterCombined != nil {
		s.afterCombined()
	}
	results := make([]eventstore.StreamResult, len(parts))
	var rest []int
	for i := range parts {
		if res, ok := written[i]; ok {
			results[i].AppendResult = res
		} else {
			rest = append(rest, i)
		}
	}
	if len(rest) > 0 {
		if err := s.resolve(ctx, parts, rest, results, then); err != nil {
			return nil, err
		}
	}
	return results, nil
}

// appendEach appends the parts one by one as Append does, each in a
// transaction of its own followed by the statements of then.
func (s *Store) appendEach(ctx context.Context, parts []part, then []Statement) ([]eventstore.StreamResult, error) {
	results := make([]eventstore.StreamResult, len(parts))
	for i, p := range parts {
		res, err := s.appendStream(ctx, p, then)
		if err != nil && !streamErr(err) {
			return nil, err
		}
		results[i] = eventstore.StreamResult{AppendResult: res, Err: err}
	}
	return results, nil
}

// streamErr reports whether err belongs to one stream's result rather than
// to the whole call.
func streamErr(err error) bool {
	return errors.Is(err, eventstore.ErrWrongExpectedVersion) || errors.Is(err, eventstore.ErrDuplicateEventID)
}

// insertAll runs appendMultiSQL and then, and returns the results of the
// streams it wrote by their index in parts. A failing statement is
// ErrStatement; other errors are the driver's. When the events' seq had no
// partition, it creates the partitions ahead and runs again, as insert
// does.
func (s *Store) insertAll(ctx context.Context, parts []part, then []Statement) (map[int]eventstore.AppendResult, error) {
	written, err := s.insertAllOnce(ctx, parts, then)
	for attempt := 1; noPartition(err) && attempt < maxAttempts; attempt++ {
		if _, gerr := s.EnsurePartitions(ctx, ahead(attempt)); gerr != nil {
			return nil, gerr
		}
		written, err = s.insertAllOnce(ctx, parts, then)
	}
	return written, err
}

func (s *Store) insertAllOnce(ctx context.Context, parts []part, then []Statement) (map[int]eventstore.AppendResult, error) {
	args, index := multiArgs(parts)
	var written map[int]eventstore.AppendResult
	err := s.pipeline(ctx, appendMultiSQL, args, checked(parts...), then, func(rows pgx.Rows) (err error) {
		written, err = collectMulti(rows, index)
		return err
	})
	return written, err
}

// multiArgs returns the arguments of appendMultiSQL for parts, and the
// index of each stream in parts. The streams go in name order, so that two
// calls sharing streams lock their shared heads in the same order: the
// later waits for the earlier and then checks its conditions against the
// heads the earlier left, instead of deadlocking.
func multiArgs(parts []part) ([]any, map[string]int) {
	order := make([]int, len(parts))
	n := 0
	for i := range order {
		order[i] = i
		n += len(parts[i].Events)
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(parts[a].Stream, parts[b].Stream) })
	var (
		streams    = make(pgarray.Text, len(parts))
		codes      = make(pgarray.Int4, len(parts))
		revs       = make(pgarray.Int8, len(parts))
		counts     = make(pgarray.Int8, len(parts))
		index      = make(map[string]int, len(parts))
		at, ords   = make(pgarray.Int8, 0, n), make(pgarray.Int8, 0, n)
		ids        = make(pgarray.Text, 0, n)
		types      = make(pgarray.Text, 0, n)
		data, meta = make(pgarray.Bytes, 0, n), make(pgarray.Bytes, 0, n)
	)
	for k, i := range order {
		p := parts[i]
		streams[k], codes[k], revs[k], counts[k] = p.Stream, int32(p.code), p.rev, int64(len(p.Events))
		index[p.Stream] = i
		for j, e := range p.Events {
			at, ords = append(at, int64(k+1)), append(ords, int64(j+1))
			ids, types = append(ids, e.ID), append(types, e.Type)
			data, meta = append(data, e.Data), append(meta, e.Metadata) // nil is sent empty
		}
	}
	return []any{streams, codes, revs, at, ords, ids, types, data, meta, counts}, index
}

// collectMulti reads the rows appendMultiSQL returned into the result of
// each stream written, by the stream's index.
func collectMulti(rows pgx.Rows, index map[string]int) (map[int]eventstore.AppendResult, error) {
	written := make(map[int]eventstore.AppendResult)
	var (
		stream             string
		revision, xid, seq int64
	)
	_, err := pgx.ForEachRow(rows, []any{&stream, &revision, &xid, &seq}, func() error {
		i, ok := index[stream]
		if !ok {
			return fmt.Errorf("append returned a row of stream %s, not appended to", stream)
		}
		if res, seen := written[i]; !seen || uint64(revision) > res.NextRevision {
			written[i] = eventstore.AppendResult{NextRevision: uint64(revision), Position: eventstore.Position{Commit: uint64(xid), Prepare: uint64(seq)}}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return written, nil
}

// resolve fills in the results of the parts at rest, which the combined
// statement did not write, as Append resolves a failed insert; a condition
// that holds by now is appended again on its own.
func (s *Store) resolve(ctx context.Context, parts []part, rest []int, results []eventstore.StreamResult, then []Statement) error {
	found, current, err := s.lookup(ctx, parts, rest)
	if err != nil {
		return multiErr(ctx, err)
	}
	for k, i := range rest {
		p := parts[i]
		res, ok, err := placed(p.Stream, p.Expected, p.Events, found)
		if ok || err != nil {
			results[i] = eventstore.StreamResult{AppendResult: res, Err: err}
			continue
		}
		exists, actual := current[k] >= 0, uint64(max(current[k], 0))
		if !p.Expected.Satisfied(exists, actual) {
			results[i].Err = &eventstore.WrongExpectedVersionError{Stream: p.Stream, Expected: p.Expected, Exists: exists, Actual: actual}
			continue
		}
		// An append we raced committed between the statement's snapshot
		// and now, and the condition holds: append this stream alone.
		res, err = s.appendStream(ctx, p, then)
		if err != nil && !streamErr(err) {
			return err
		}
		results[i] = eventstore.StreamResult{AppendResult: res, Err: err}
	}
	return nil
}

// resolveSQL reads the current revision of each stream of $1 from its
// head, -1 for none.
const resolveSQL = `SELECT coalesce((SELECT h.revision FROM event_stream h WHERE h.stream = want.stream), -1)
FROM unnest($1::text[]) WITH ORDINALITY AS want(stream, i) ORDER BY want.i`

// lookup reads, in one round trip, the stored events with the IDs of the
// parts at rest, and the current revision of each of their streams (-1 for
// none), in the order of rest.
func (s *Store) lookup(ctx context.Context, parts []part, rest []int) (map[eventKey]eventstore.RecordedEvent, []int64, error) {
	var (
		ids     []string
		streams = make([]string, len(rest))
	)
	for k, i := range rest {
		ids = append(ids, eventIDs(parts[i].Events)...)
		streams[k] = parts[i].Stream
	}
	b := &pgx.Batch{}
	b.Queue(selectByID, streams, ids)
	b.Queue(resolveSQL, streams)
	br := s.pool.SendBatch(ctx, b)
	rows, _ := br.Query()
	stored, err := collectEvents(rows)
	var current []int64
	if err == nil {
		rows, _ = br.Query()
		current, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err == nil && len(current) != len(rest) {
		err = fmt.Errorf("read %d current revisions for %d streams", len(current), len(rest))
	}
	if err != nil {
		return nil, nil, err
	}
	return byID(stored), current, nil
}

// queue adds the statements to b.
func queue(b *pgx.Batch, then []Statement) {
	for _, st := range then {
		b.Queue(st.SQL, st.Args...)
	}
}

// execStatements reads the results of the n statements queued after the
// append. A statement the server refused is ErrStatement, with the driver's
// message only; losing the server (storeerr.Unavailable) is not the statement's
// doing and is returned as it is, for the caller to translate.
func execStatements(ctx context.Context, br pgx.BatchResults, n int) error {
	for i := range n {
		if _, err := br.Exec(); err != nil {
			if ctxErr := ctx.Err(); ctxErr != nil {
				return fmt.Errorf("append: statement %d: %w", i, ctxErr)
			}
			if storeerr.Unavailable(err) {
				return err
			}
			return fmt.Errorf("append: statement %d: %v: %w", i, err, ErrStatement)
		}
	}
	return nil
}

// multiErr translates a call-level error of AppendMultiWith.
func multiErr(ctx context.Context, err error) error {
	if errors.Is(err, ErrStatement) {
		return err
	}
	return storeerr.Wrap(ctx, "append to several streams", err)
}
