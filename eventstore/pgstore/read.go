package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/storeerr"
)

const selectEvents = `SELECT id::text, stream, revision, xid::text::bigint, seq, type, data, metadata, recorded_at FROM event`

func scanEvent(row pgx.CollectableRow) (eventstore.RecordedEvent, error) {
	var (
		e             eventstore.RecordedEvent
		revision, xid int64
		seq           int64
		at            time.Time
	)
	err := row.Scan(&e.ID, &e.Stream, &revision, &xid, &seq, &e.Type, &e.Data, &e.Metadata, &at)
	e.Revision = uint64(revision)
	e.Position = eventstore.Position{Commit: uint64(xid), Prepare: uint64(seq)}
	e.RecordedAt = at
	return e, err
}

// collectEvents reads the rows of selectEvents. It is scanEvent for every
// row, at a fraction of the allocations: the scan targets are reused from
// row to row, an event's type is one of a few strings kept for the whole
// read, and its body and metadata share one copy. Rows whose body and
// metadata are not in binary format (a pool set to the simple protocol)
// are scanned by scanEvent.
func collectEvents(rows pgx.Rows) ([]eventstore.RecordedEvent, error) {
	defer rows.Close()
	fields := rows.FieldDescriptions()
	if len(fields) != 9 || fields[6].Format != pgtype.BinaryFormatCode || fields[7].Format != pgtype.BinaryFormatCode {
		return pgx.AppendRows([]eventstore.RecordedEvent(nil), rows, scanEvent)
	}
	var (
		events             = []eventstore.RecordedEvent{} // empty, not nil, as pgx.CollectRows gives
		id, stream         string
		revision, xid, seq int64
		at                 time.Time
		types              = make(map[string]string)
		targets            = []any{&id, &stream, &revision, &xid, &seq, nil, nil, nil, &at}
	)
	for rows.Next() {
		if err := rows.Scan(targets...); err != nil {
			return nil, err
		}
		raw := rows.RawValues() // valid until the next row
		typ := keep(types, raw[5])
		body := make([]byte, len(raw[6])+len(raw[7]))
		n := copy(body, raw[6])
		copy(body[n:], raw[7])
		events = append(events, eventstore.RecordedEvent{
			ID: id, Stream: stream, Revision: uint64(revision), Type: typ,
			Position: eventstore.Position{Commit: uint64(xid), Prepare: uint64(seq)},
			Data:     body[:n:n], Metadata: body[n:], RecordedAt: at,
		})
	}
	return events, rows.Err()
}

// readStreamSQL reads a stream's events from a revision on. Each partition
// finds the stream's rows by its index on stream (migration 0005) and the
// few of them are sorted by revision.
const readStreamSQL = selectEvents + ` WHERE stream = $1 AND revision >= $2 ORDER BY revision`

// ReadStream implements eventstore.Store.
func (s *Store) ReadStream(ctx context.Context, stream string, from uint64) ([]eventstore.RecordedEvent, error) {
	op := "read " + stream
	var events []eventstore.RecordedEvent
	err := s.read(ctx, func() (err error) {
		rows, _ := s.pool.Query(ctx, readStreamSQL, stream, clamp(from))
		events, err = collectEvents(rows)
		return err
	})
	if err != nil {
		return nil, storeerr.Wrap(ctx, op, err)
	}
	if len(events) > 0 {
		return events, nil
	}
	exists := false
	if from > 0 {
		err := s.read(ctx, func() error {
			return s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM event WHERE stream = $1)`, stream).Scan(&exists)
		})
		if err != nil {
			return nil, storeerr.Wrap(ctx, op, err)
		}
	}
	if !exists {
		return nil, fmt.Errorf("%s: %w", op, eventstore.ErrStreamNotFound)
	}
	return nil, nil
}

// readable is the condition for a row to be in the global order yet: its
// transaction is older than every transaction still running, so every row
// that will ever sort before it is committed (or rolled back) already.
const readable = `xid < pg_snapshot_xmin(pg_current_snapshot())`

// after selects rows sorting after the position ($1, $2).
const after = `(xid, seq) > ($1::text::xid8, $2::bigint)`

// readAllSQL reads the global order after a position: a range scan of each
// partition's index on xid from the position's xid on (migration 0006),
// merged in xid order, each transaction's rows sorted by seq (an
// incremental sort; a ledger upgraded with events may still scan its
// primary key (xid, seq) instead, docs/operations.md).
const readAllSQL = selectEvents + ` WHERE ` + after + ` AND ` + readable + ` ORDER BY event.xid, event.seq LIMIT $3`

// ReadAll implements eventstore.Store.
//
// Positions are (transaction ID, sequence). Only rows of transactions older
// than the oldest one still running are returned, so a transaction that is
// slow to commit holds back the events committed after it rather than
// appearing later behind a reader's position.
func (s *Store) ReadAll(ctx context.Context, pos eventstore.Position, limit int) ([]eventstore.RecordedEvent, error) {
	if limit <= 0 {
		return nil, nil
	}
	var events []eventstore.RecordedEvent
	err := s.read(ctx, func() (err error) {
		rows, _ := s.pool.Query(ctx, readAllSQL, uintText(pos.Commit), clamp(pos.Prepare), limit)
		events, err = collectEvents(rows)
		return err
	})
	if err != nil {
		return nil, storeerr.Wrap(ctx, "read all after "+pos.String(), err)
	}
	return events, nil
}

// ReadAllHeads reads the global order as ReadAll does, the same events
// in the same order, but only their stream, revision, position and type:
// no ID, body, metadata or time. It serves a reader that only needs to
// know which streams changed how (the ledger's watcher), at a fraction of
// ReadAll's cost in the database and in decoding.
func (s *Store) ReadAllHeads(ctx context.Context, pos eventstore.Position, limit int) ([]eventstore.RecordedEvent, error) {
	if limit <= 0 {
		return nil, nil
	}
	var events []eventstore.RecordedEvent
	err := s.read(ctx, func() (err error) {
		rows, _ := s.pool.Query(ctx, `SELECT stream, revision, xid::text::bigint, seq, type FROM event WHERE `+after+` AND `+readable+
			` ORDER BY event.xid, event.seq LIMIT $3`, uintText(pos.Commit), clamp(pos.Prepare), limit)
		events, err = collectHeads(rows)
		return err
	})
	if err != nil {
		return nil, storeerr.Wrap(ctx, "read all after "+pos.String(), err)
	}
	return events, nil
}

// keep returns the string of b, one per distinct value in kept.
func keep(kept map[string]string, b []byte) string {
	if s, ok := kept[string(b)]; ok {
		return s
	}
	s := string(b)
	kept[s] = s
	return s
}

// collectHeads reads ReadAllHeads' rows, reusing its scan targets from
// row to row and keeping one string per event type, read from the row's raw
// bytes.
func collectHeads(rows pgx.Rows) ([]eventstore.RecordedEvent, error) {
	defer rows.Close()
	var (
		events             = []eventstore.RecordedEvent{} // empty, not nil, as pgx.CollectRows gives
		stream             string
		revision, xid, seq int64
		types              = make(map[string]string)
		targets            = []any{&stream, &revision, &xid, &seq, nil}
	)
	for rows.Next() {
		if err := rows.Scan(targets...); err != nil {
			return nil, err
		}
		typ := keep(types, rows.RawValues()[4]) // text: the same bytes in either format
		events = append(events, eventstore.RecordedEvent{Stream: stream, Revision: uint64(revision), Type: typ,
			Position: eventstore.Position{Commit: uint64(xid), Prepare: uint64(seq)}})
	}
	return events, rows.Err()
}

func clamp(n uint64) int64 {
	if n > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(n)
}

func uintText(n uint64) string { return strconv.FormatUint(n, 10) }

// headSQL reads the last readable position from the end of each
// partition's index on xid, sorting the last transaction's rows. Its ORDER BY names the table's columns: a bare "xid" would be the
// output column of the same name, the bigint cast, which no index orders,
// and the head would cost a sort of the whole table.
const headSQL = `SELECT xid::text::bigint, seq FROM event WHERE ` + readable + ` ORDER BY event.xid DESC, event.seq DESC LIMIT 1`

// Head returns the position of the last event readable in the global order
// now (eventstore.Start when there is none): a reader starting there sees
// every event that becomes readable later.
func (s *Store) Head(ctx context.Context) (eventstore.Position, error) {
	var xid, seq int64
	err := s.read(ctx, func() error {
		return s.pool.QueryRow(ctx, headSQL).Scan(&xid, &seq)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return eventstore.Start, nil
	}
	if err != nil {
		return eventstore.Position{}, storeerr.Wrap(ctx, "read the head of the global order", err)
	}
	return eventstore.Position{Commit: uint64(xid), Prepare: uint64(seq)}, nil
}
