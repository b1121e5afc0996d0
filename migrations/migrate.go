package migrations

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/eventstore/storeerr"
)

// lockKey is the advisory lock held while migrating: the bytes of
// "rlmigrat" as a bigint, unlikely to collide with another application's key.
const lockKey int64 = 0x726c6d6967726174

const createTable = `CREATE TABLE IF NOT EXISTS reviewledger_migration (
	version    integer PRIMARY KEY,
	name       text NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT now()
)`

// Status describes one migration and whether the database has it.
type Status struct {
	Version   int
	Name      string
	Applied   bool
	AppliedAt time.Time // zero unless Applied
}

// Apply applies every embedded migration the database does not have yet, in
// version order, and returns the versions it applied (none when the database
// is current). It holds an advisory lock for the whole run.
func Apply(ctx context.Context, pool *pgxpool.Pool) ([]int, error) {
	all, err := All()
	if err != nil {
		return nil, err
	}
	return apply(ctx, pool, all)
}

func apply(ctx context.Context, pool *pgxpool.Pool, all []Migration) ([]int, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, storeerr.Wrap(ctx, "migrate", err)
	}
	defer conn.Release()

	// A session-level lock, so that it spans the per-migration transactions.
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, lockKey); err != nil {
		return nil, storeerr.Wrap(ctx, "migrate: lock", err)
	}
	defer func() {
		// Unlock even when ctx is done; if that fails too, closing the
		// connection releases the lock.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, `SELECT pg_advisory_unlock($1)`, lockKey); err != nil {
			_ = conn.Hijack().Close(uctx)
		}
	}()

	if _, err := conn.Exec(ctx, createTable); err != nil {
		return nil, storeerr.Wrap(ctx, "migrate: create version table", err)
	}
	done, err := appliedVersions(ctx, conn.Conn())
	if err != nil {
		return nil, err
	}
	var applied []int
	for _, m := range all {
		if _, ok := done[m.Version]; ok {
			continue
		}
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO reviewledger_migration (version, name) VALUES ($1, $2)`, m.Version, m.Name)
			return err
		})
		if err != nil {
			return applied, storeerr.Wrap(ctx, fmt.Sprintf("migrate: %04d_%s", m.Version, m.Name), err)
		}
		applied = append(applied, m.Version)
	}
	return applied, nil
}

func appliedVersions(ctx context.Context, conn *pgx.Conn) (map[int]time.Time, error) {
	rows, _ := conn.Query(ctx, `SELECT version, applied_at FROM reviewledger_migration`)
	done := make(map[int]time.Time)
	var (
		v  int
		at time.Time
	)
	_, err := pgx.ForEachRow(rows, []any{&v, &at}, func() error {
		done[v] = at
		return nil
	})
	if err != nil {
		return nil, storeerr.Wrap(ctx, "migrate: read versions", err)
	}
	return done, nil
}

// List reports every embedded migration and whether the database has it, in
// version order. A database never migrated lists every migration as pending.
func List(ctx context.Context, pool *pgxpool.Pool) ([]Status, error) {
	all, err := All()
	if err != nil {
		return nil, err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, storeerr.Wrap(ctx, "migration status", err)
	}
	defer conn.Release()
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('reviewledger_migration') IS NOT NULL`).Scan(&exists); err != nil {
		return nil, storeerr.Wrap(ctx, "migration status", err)
	}
	done := map[int]time.Time{}
	if exists {
		if done, err = appliedVersions(ctx, conn.Conn()); err != nil {
			return nil, err
		}
	}
	out := make([]Status, len(all))
	for i, m := range all {
		at, ok := done[m.Version]
		out[i] = Status{Version: m.Version, Name: m.Name, Applied: ok, AppliedAt: at}
	}
	return out, nil
}
