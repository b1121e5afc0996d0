package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/migrations"
)

// MigrateCmd applies pending migrations.
type MigrateCmd struct {
	Config `embed:""`
}

// Run applies every pending migration and prints what it applied.
func (c *MigrateCmd) Run(ctx context.Context, log *slog.Logger, out io.Writer) error {
	cfg := &c.Config
	pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	defer pool.Close()
	applied, err := migrate(ctx, pool, log)
	if err != nil {
		return err
	}
	if len(applied) == 0 {
		_, err = fmt.Fprintln(out, "database is up to date")
		return err
	}
	for _, v := range applied {
		if _, err := fmt.Fprintf(out, "applied %04d\n", v); err != nil {
			return err
		}
	}
	return nil
}

// migrate applies pending migrations under the migrator's advisory lock and
// logs what it did.
func migrate(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) ([]int, error) {
	applied, err := migrations.Apply(ctx, pool)
	if err != nil {
		return applied, err
	}
	log.Info("migrations applied", "versions", applied)
	return applied, nil
}
