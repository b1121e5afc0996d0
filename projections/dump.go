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
