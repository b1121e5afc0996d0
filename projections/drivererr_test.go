package projections

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestDriverErrorsStayInside: a failing query answers with its message
// and, when the caller's context ended, that context's error, but never
// with a pgx or pgconn type.
func TestDriverErrorsStayInside(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.pool.Exec(ctx, `DROP TABLE manual_queue CASCADE`); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for name, call := range map[string]func(context.Context) error{
		"ManualQueue": func(ctx context.Context) error {
			_, err := e.db.ManualQueue(ctx, QueueQuery{Limit: 10}, now)
			return err
		},
		"CountQueue":    func(ctx context.Context) error { _, err := e.db.CountQueue(ctx, QueueQuery{}, now); return err },
		"ExpiredClaims": func(ctx context.Context) error { _, err := e.db.ExpiredClaims(ctx, now, 10); return err },
		"CountBreaches": func(ctx context.Context) error { _, err := e.db.CountBreaches(ctx, now); return err },
		"SLO":           func(ctx context.Context) error { _, err := e.db.SLO(ctx, time.Hour, "", now); return err },
	} {
		err := call(ctx)
		var pgErr *pgconn.PgError
		if err == nil || errors.As(err, &pgErr) || errors.Is(err, pgx.ErrNoRows) {
			t.Errorf("%s on a dropped table: %v (%T): want an error of this package's, no driver type", name, err, err)
		} else if !strings.Contains(err.Error(), "manual_queue") {
			t.Errorf("%s: %v: the cause is lost", name, err)
		}
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		if err := call(cancelled); !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled context: %v, want context.Canceled", name, err)
		}
	}
}
