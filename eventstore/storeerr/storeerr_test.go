package storeerr_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/storeerr"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// The errors of a database gone away count as unavailable (a warning);
// others do not.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), dbtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	raw := conn.Hijack()
	_ = raw.Close(context.Background())
	pool.Close()
	_, closedErr := raw.Exec(context.Background(), "SELECT 1")
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("batch: %w", closedErr), true},
		{fmt.Errorf("read: %w", eventstore.ErrUnavailable), true},
		{fmt.Errorf("query: %w", pgconn.ErrConnClosed), true},
		{&pgconn.PgError{Code: "57P01"}, true},
		{&pgconn.PgError{Code: "08006"}, true},
		{&pgconn.PgError{Code: "25006"}, true},
		{&pgconn.PgError{Code: "23505"}, false},
		{errors.New("signing: key rejected"), false},
	} {
		if got := storeerr.Unavailable(c.err); got != c.want {
			t.Errorf("Unavailable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
