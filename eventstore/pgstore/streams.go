package pgstore

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/storeerr"
)

// Streams returns the names of the streams that have at least one event,
// start with prefix and sort after after, in name order, at most limit of
// them (every one when limit is 0). Unlike ReadAll it does not wait for
// older transactions: it lists what is committed now. Auditors use it to
// enumerate every review without reading every event, a page at a time:
// the next page is the one after the last name of this one.
func (s *Store) Streams(ctx context.Context, prefix, after string, limit int) ([]string, error) {
	rows, _ := s.pool.Query(ctx, `SELECT DISTINCT stream FROM event
		WHERE starts_with(stream, $1) AND stream > $2 ORDER BY stream LIMIT nullif($3, 0)`, prefix, after, limit)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, storeerr.Wrap(ctx, "list streams", err)
	}
	return names, nil
}

// ReadStreams returns the events of every stream of names that exists,
// each stream's in revision order, in one read; a stream that does not
// exist is not in the map. It is ReadStream of each name, for a reader of
// many streams at once (an auditor checking every review) that would
// otherwise pay a round trip per stream. Like ReadStream, it reads what is
// committed now.
func (s *Store) ReadStreams(ctx context.Context, names []string) (map[string][]eventstore.RecordedEvent, error) {
	var events []eventstore.RecordedEvent
	err := s.read(ctx, func() (err error) {
		rows, _ := s.pool.Query(ctx, selectEvents+` WHERE stream = ANY($1) ORDER BY stream, revision`, names)
		events, err = collectEvents(rows)
		return err
	})
	if err != nil {
		return nil, storeerr.Wrap(ctx, "read streams", err)
	}
	out := make(map[string][]eventstore.RecordedEvent, len(names))
	for start := 0; start < len(events); {
		end := start + 1
		for end < len(events) && events[end].Stream == events[start].Stream {
			end++
		}
		out[events[start].Stream] = events[start:end:end]
		start = end
	}
	return out, nil
}
