package projections

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// customPlansFrom is the number of events read from which a batch is a
// catch-up's (or a rebuild's) rather than a serving runner's few: its
// statements are then planned for their own arguments.
const customPlansFrom = 500

// planForArguments makes the statements of tx planned for the arguments
// they are run with (plan_cache_mode force_custom_plan) rather than with
// a generic plan PostgreSQL caches on the connection after five runs.
//
// A read model's table is nearly empty when a catch-up from nothing or a
// rebuild starts, and the generic plan of a lookup by review ID chosen
// then is a sequential scan, kept while the table fills: slo_open and
// provider_open, whose rows are inserted and deleted batch after batch,
// were scanned whole, dead rows included, by every batch's load and delete
// (a third of a rebuild's database time at 300,000 reviews). Planning a
// statement costs far less than such a batch's work; a serving runner's
// small batches keep the cached plans, made on tables with statistics.
func planForArguments(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = force_custom_plan`)
	return err
}
