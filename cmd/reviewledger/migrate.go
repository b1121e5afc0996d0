package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/eventstore/storeerr"
	"github.com/reviewledger/reviewledger/migrations"
)

// MigrateCmd applies pending migrations.
type MigrateCmd struct {
	Config `embed:""`

	Status bool `help:"List every migration and whether the database has it, and apply nothing."`
}

// Run applies every pending migration and prints what it applied.
func (c *MigrateCmd) Run(ctx context.Context, log *slog.Logger, out io.Writer) error {
	cfg := &c.Config
	// The migration lock is a session's: on the server itself when
	// DATABASE_URL goes through a transaction pooler.
	pc, err := pgxpool.ParseConfig(cfg.sessionURL())
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	if pooled, err := pooler(ctx, pc.ConnConfig); err == nil && pooled {
		return cfg.sessionPooled()
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	defer pool.Close()
	if c.Status {
		return printStatus(ctx, pool, out)
	}
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
	if err := ping(ctx, pool); err != nil {
		return nil, err
	}
	applied, err := migrations.Apply(ctx, pool)
	if err != nil {
		return applied, err
	}
	log.Info("migrations applied", "versions", applied)
	return applied, nil
}

// ping checks that the database answers. The error names DATABASE_URL and,
// when the server answers but has no such database, says so in one line
// with the command that creates it.
func ping(ctx context.Context, pool *pgxpool.Pool) error {
	err := pool.Ping(ctx)
	if err == nil {
		return nil
	}
	if storeerr.Code(err) == storeerr.CodeInvalidCatalogName { // the database named does not exist
		cc := pool.Config().ConnConfig
		return fmt.Errorf("DATABASE_URL: database %q does not exist on %s:%d; create it (createdb -h %s -p %d -U %s %s) or name another",
			cc.Database, cc.Host, cc.Port, cc.Host, cc.Port, cc.User, cc.Database)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("DATABASE_URL: cannot reach the database: %v", err)
}

func printStatus(ctx context.Context, pool *pgxpool.Pool, out io.Writer) error {
	status, err := migrations.List(ctx, pool)
	if err != nil {
		return err
	}
	for _, s := range status {
		state := "pending"
		if s.Applied {
			state = "applied " + s.AppliedAt.UTC().Format(time.RFC3339)
		}
		if _, err := fmt.Fprintf(out, "%04d_%s\t%s\n", s.Version, s.Name, state); err != nil {
			return err
		}
	}
	return nil
}
