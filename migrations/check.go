package migrations

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/eventstore/storeerr"
)

// ErrNotMigrated is matched by Check's error when the database lacks
// migrations embedded in this program.
var ErrNotMigrated = errors.New("database not migrated")

// NotMigratedError says how far a database is migrated.
type NotMigratedError struct {
	Database string // the database's name
	// Applied counts the embedded migrations the database has, Total all of
	// them; Missing is the first one it lacks.
	Applied, Total int
	Missing        Migration
}

func (e *NotMigratedError) Error() string {
	return fmt.Sprintf("database %s is not migrated (version %d of %d)", e.Database, e.Applied, e.Total)
}

// Unwrap makes errors.Is(err, ErrNotMigrated) true.
func (e *NotMigratedError) Unwrap() error { return ErrNotMigrated }

// Check reports whether the database has every embedded migration, and
// changes nothing: it creates no version table and applies nothing. The
// error is a *NotMigratedError when migrations are missing (a database never
// migrated has applied 0), or the failure to read.
func Check(ctx context.Context, pool *pgxpool.Pool) error {
	status, err := List(ctx, pool)
	if err != nil {
		return err
	}
	e := &NotMigratedError{Total: len(status)}
	for _, s := range status {
		switch {
		case s.Applied:
			e.Applied++
		case e.Missing.Version == 0:
			e.Missing = Migration{Version: s.Version, Name: s.Name}
		}
	}
	if e.Applied == e.Total {
		return nil
	}
	if err := pool.QueryRow(ctx, `SELECT current_database()`).Scan(&e.Database); err != nil {
		return storeerr.Wrap(ctx, "migration status", err)
	}
	return e
}
