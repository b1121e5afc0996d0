package projections

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
)

// Dump returns every row of every projection's tables, as text, sorted,
// keyed by table: what a run of the projections and a rebuild from the
// same ledger must agree on, row for row.
func Dump(ctx context.Context, q interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}) (map[string][]string, error) {
	out := map[string][]string{}
	for _, p := range all() {
		for _, table := range p.tables() {
			rows, err := q.Query(ctx, fmt.Sprintf(`SELECT t::text FROM %s t`, liveTables.name(table)))
			if err != nil {
				return nil, fmt.Errorf("dump %s: %w", table, err)
			}
			lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return nil, fmt.Errorf("dump %s: %w", table, err)
			}
			slices.Sort(lines)
			out[table] = lines
		}
	}
	return out, nil
}

// TableDigest is a projection table's row count and an order-independent
// digest of its rows (the sum of a 64-bit hash of each row's text).
type TableDigest struct {
	Rows   int64
	Digest string
}

// Digests is Dump for read models too large to hold: every projection
// table's TableDigest, computed in the database. Two sets of read models
// with equal digests hold the same rows but for a hash collision.
func Digests(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) (map[string]TableDigest, error) {
	out := map[string]TableDigest{}
	for _, p := range all() {
		for _, table := range p.tables() {
			var d TableDigest
			err := q.QueryRow(ctx, fmt.Sprintf(`SELECT count(*), coalesce(sum(hashtextextended(t::text, 0)::numeric), 0)::text FROM %s t`,
				liveTables.name(table))).Scan(&d.Rows, &d.Digest)
			if err != nil {
				return nil, fmt.Errorf("digest %s: %w", table, err)
			}
			out[table] = d
		}
	}
	return out, nil
}
