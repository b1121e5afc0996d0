package projections

import (
	"context"
	"fmt"

	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/storeerr"
)

// dbErr translates an error of the driver (pgx, pgconn) at the edge of this
// package, which owns the read models' SQL: the context's error when ctx
// ended (so errors.Is(err, context.Canceled) still holds), otherwise only
// the message, matching eventstore.ErrUnavailable when the database could
// not be used (unavailable). No driver type reaches callers, who match this
// package's sentinels (ErrInvalidQuery, ErrClaimedByOther, ...) or nothing.
func dbErr(ctx context.Context, op string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("%s: %w", op, ctxErr)
	}
	if storeerr.Unavailable(err) {
		return fmt.Errorf("%s: %v: %w", op, err, eventstore.ErrUnavailable)
	}
	return fmt.Errorf("%s: %v", op, err)
}
