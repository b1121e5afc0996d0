package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/migrations"
)

// ledgerDB is what an operator command works on: the PostgreSQL database
// (read models, audit anchors and checkpoints, whatever the ledger's
// backend) and the ledger REVIEWLEDGER_EVENTSTORE selects.
type ledgerDB struct {
	Pool   *pgxpool.Pool
	Store  eventstore.Store
	Ledger *ledger.Ledger
	close  func()
}

// Close releases the ledger and the database.
func (db *ledgerDB) Close() { db.close() }

// openLedger opens the database and the configured ledger for an operator
// command (audit, replay, projections). It never migrates: only serve and
// migrate change the schema, so a database that lacks migrations is refused
// with one line naming it and how far it is migrated.
func openLedger(ctx context.Context, cfg *Config, sc StoreConfig, log *slog.Logger) (*ledgerDB, error) {
	pool, err := openMigrated(ctx, cfg)
	if err != nil {
		return nil, err
	}
	store, closeStore, err := sc.open(ctx, pools{Main: pool, Sessions: pool}, nil, log)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &ledgerDB{Pool: pool, Store: store, Ledger: ledger.New(store), close: func() { closeStore(); pool.Close() }}, nil
}

// openMigrated opens DATABASE_URL and checks, changing nothing, that it has
// every migration of this program.
//
// The session that answers the ping is asked whether DATABASE_URL reaches
// a connection pooler (mainPoolConfig's rules), so that a command opens
// one server session, not a probe's and then the pool's (each a backend
// started: most of a short command's time, as audit verify --review).
func openMigrated(ctx context.Context, cfg *Config) (*pgxpool.Pool, error) {
	pc, err := cfg.parseMain(slog.Default())
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	if err := ping(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	if pool, err = reopenForPooler(ctx, cfg, pc, pool); err != nil {
		return nil, err
	}
	if err := migrations.Check(ctx, pool); err != nil {
		pool.Close()
		if errors.Is(err, migrations.ErrNotMigrated) {
			return nil, fmt.Errorf(`%w: run "reviewledger migrate"`, err)
		}
		return nil, err
	}
	return pool, nil
}

// reopenForPooler asks one of pool's sessions whether DATABASE_URL reaches
// a connection pooler and, when it does, opens the pool again set up for
// one (Config.forPooler), closing the first.
func reopenForPooler(ctx context.Context, cfg *Config, pc *pgxpool.Config, pool *pgxpool.Pool) (*pgxpool.Pool, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	pooled, err := pooledConn(ctx, conn.Conn())
	conn.Release()
	if err != nil || !pooled {
		if err != nil {
			pool.Close()
			return nil, fmt.Errorf("DATABASE_URL: %w", err)
		}
		return pool, nil
	}
	pool.Close()
	if err := cfg.forPooler(pc); err != nil {
		return nil, err
	}
	if pool, err = pgxpool.NewWithConfig(ctx, pc); err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	return pool, nil
}
