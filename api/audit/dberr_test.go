package audit

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/reviewledger/reviewledger/eventstore"
)

// A database gone away is ErrUnavailable (the signer logs a warning); a
// statement the server refused is not, and neither error is pgx's.
func TestDBErrMarksTheDatabaseGoneAway(t *testing.T) {
	ctx := context.Background()
	gone := dbErr(ctx, "audit signing lock", &pgconn.PgError{Code: "57P01", Message: "terminating connection"})
	if !errors.Is(gone, eventstore.ErrUnavailable) {
		t.Errorf("%v: not ErrUnavailable", gone)
	}
	refused := dbErr(ctx, "store checkpoint", &pgconn.PgError{Code: "23505", Message: "duplicate key"})
	if errors.Is(refused, eventstore.ErrUnavailable) {
		t.Errorf("%v: ErrUnavailable", refused)
	}
	var pgErr *pgconn.PgError
	if errors.As(gone, &pgErr) || errors.As(refused, &pgErr) {
		t.Error("a pgx error type reached the caller")
	}
}
