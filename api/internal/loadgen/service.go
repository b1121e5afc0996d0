package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/reviewledger/reviewledger/api/engine"
	"github.com/reviewledger/reviewledger/api/engine/hint"
	"github.com/reviewledger/reviewledger/api/engine/provider"
	"github.com/reviewledger/reviewledger/api/engine/work/pgwork"
	"github.com/reviewledger/reviewledger/api/httpapi"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/pgstore"
	"github.com/reviewledger/reviewledger/migrations"
	"github.com/reviewledger/reviewledger/projections"
)

// service is the whole service running in this process, wired as
// reviewledger serve wires it, with the HTTP API on a loopback port.
type service struct {
	pool      *pgxpool.Pool
	projector *projections.Runner
	baseURL   string // http://127.0.0.1:port
	submitter string // bearer tokens
	auditor   string

	stop func() error // stops every part and closes the pool
}

// database opens the run's database: a new one on cfg.AdminURL, dropped by
// the returned function, or cfg.DatabaseURL as it is. The schema is
// migrated either way.
func database(ctx context.Context, cfg Config) (dbURL string, drop func() error, err error) {
	if cfg.DatabaseURL != "" {
		return cfg.DatabaseURL, func() error { return nil }, nil
	}
	admin, err := pgx.Connect(ctx, cfg.AdminURL)
	if err != nil {
		return "", nil, fmt.Errorf("-admin-url: %w", err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	name := fmt.Sprintf("reviewledger_load_%d_%s", time.Now().Unix(), randomHex(4))
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", nil, fmt.Errorf("-admin-url: create database: %w", err)
	}
	drop = func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, cfg.AdminURL)
		if err != nil {
			return fmt.Errorf("drop database %s: %w", name, err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("drop database %s: %w", name, err)
		}
		return nil
	}
	return withDatabase(cfg.AdminURL, name), drop, nil
}

// start migrates the database and runs the service on it: event store,
// ledger, runner with the simulated provider, projector, and the API on
// 127.0.0.1 with an ephemeral port.
func start(ctx context.Context, cfg Config, dbURL string) (*service, error) {
	pcfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, fmt.Errorf("database URL: %w", err)
	}
	// As serve sizes it.
	pcfg.MaxConns = 24
	if cfg.PoolConns > 0 {
		pcfg.MaxConns = cfg.PoolConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("database URL: %w", err)
	}
	if _, err := migrations.Apply(ctx, pool); err != nil {
		pool.Close()
		return nil, fmt.Errorf("migrate: %w", err)
	}
	level := slog.LevelError
	if cfg.Verbose {
		level = slog.LevelWarn
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	reg := prometheus.NewRegistry()

	store := pgstore.New(pool, pgstore.Config{Logger: log})
	work := pgwork.New(pool, store)
	led := work.Ledger(ledger.GroupCommit{})
	readModels := projections.NewDB(pool)

	signer, err := provider.NewSigner(provider.NewSecret())
	if err != nil {
		store.Close()
		pool.Close()
		return nil, err
	}
	var svc *engine.Engine
	sc := cfg.Sim
	sc.Signer = signer
	sc.Deliver = func(ctx context.Context, reviewID string, h http.Header, body []byte) error {
		return svc.HandleCallback(ctx, reviewID, h, body)
	}
	sim, err := provider.NewSim(sc)
	if err != nil {
		store.Close()
		pool.Close()
		return nil, err
	}
	svc, err = engine.New(engine.Config{
		Policy: cfg.policy(), Store: work, Ledger: led, Hints: hint.NewGoChannel(log), Provider: sim, Signer: signer,
		Logger: log, Metrics: reg, ProviderName: "sim", Calls: cfg.Workers,
	})
	if err != nil {
		_ = sim.Close()
		store.Close()
		pool.Close()
		return nil, err
	}
	projector, err := projections.NewRunner(projections.Config{Pool: pool, Store: store, Registerer: reg, Logger: log})
	if err != nil {
		_ = sim.Close()
		store.Close()
		pool.Close()
		return nil, err
	}
	submitter, auditor := "load-submitter-"+randomHex(12), "load-auditor-"+randomHex(12)
	server, err := httpapi.New(httpapi.Config{
		Tokens: []httpapi.Token{
			{Role: httpapi.RoleSubmitter, Name: "load-submitter", Secret: submitter},
			{Role: httpapi.RoleAuditor, Name: "load-auditor", Secret: auditor},
		},
		MaxInFlight: cfg.MaxInFlight,
		Registry:    reg,
		Logger:      log,
	}, httpapi.Deps{Ledger: led, Reviews: svc, ReadModels: readModels})
	if err != nil {
		_ = sim.Close()
		store.Close()
		pool.Close()
		return nil, err
	}
	l, err := new(net.ListenConfig).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		_ = sim.Close()
		store.Close()
		pool.Close()
		return nil, fmt.Errorf("listen on loopback: %w", err)
	}

	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for name, run := range map[string]func(context.Context) error{
		"api":       func(ctx context.Context) error { return server.Serve(ctx, l) },
		"engine":    svc.Run,
		"projector": projector.Run,
	} {
		wg.Go(func() {
			if err := run(runCtx); err != nil && !errors.Is(err, context.Canceled) {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
				mu.Unlock()
			}
		})
	}
	stop := func() error {
		cancel()
		wg.Wait()
		errs = append(errs, sim.Close())
		store.Close()
		pool.Close()
		return errors.Join(errs...)
	}
	return &service{
		pool: pool, projector: projector, baseURL: "http://" + l.Addr().String(),
		submitter: submitter, auditor: auditor, stop: stop,
	}, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// withDatabase returns connString naming database db instead of its own.
func withDatabase(connString, db string) string {
	if u, err := url.Parse(connString); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.Path = "/" + db
		return u.String()
	}
	return connString + " dbname=" + db
}
