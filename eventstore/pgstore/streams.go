package pgstore

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Streams returns the names of the streams that have at least one event
// and start with prefix, in name order. Unlike ReadAll it does not wait for
// older transactions: it lists what is committed now. Auditors use it to
// enumerate every review without reading every event.
func (s *Store) Streams(ctx context.Context, prefix string) ([]string, error) {
	rows, _ := s.pool.Query(ctx, `SELECT DISTINCT stream FROM event WHERE starts_with(stream, $1) ORDER BY stream`, prefix)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, storeErr("list streams", ctx, err)
	}
	return names, nil
}
