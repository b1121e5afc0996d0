package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/reviewledger/reviewledger/api"
	"github.com/reviewledger/reviewledger/api/runner"
	"github.com/reviewledger/reviewledger/api/ui"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/projections"
)

// ServeCmd runs the service: the API, the review workers, the projector and
// the deadline sweeper, in one process.
type ServeCmd struct {
	Config `embed:""`
	Runner RunnerConfig `embed:""`
	Store  StoreConfig  `embed:""`

	ClaimLease  time.Duration `name:"claim-lease" env:"REVIEWLEDGER_CLAIM_LEASE" default:"10m" help:"How long a moderator's claim on a manual-queue item lasts."`
	MaxInFlight int           `name:"max-in-flight" env:"REVIEWLEDGER_MAX_IN_FLIGHT" default:"0" help:"Admission ceiling: while this many reviews are in flight, submissions are answered 429 (0: no ceiling)."`
	ReadyMaxLag time.Duration `name:"ready-max-lag" env:"REVIEWLEDGER_READY_MAX_LAG" default:"30s" help:"/readyz fails while a projection lags more than this."`
	Roles       []string      `name:"roles" env:"REVIEWLEDGER_ROLES" default:"api,worker,projector" help:"Roles this process runs: api (HTTP), worker (review workers, resume, deadline sweeper), projector (read models)."`
}

// Roles a serve process can run.
const (
	roleAPI       = "api"
	roleWorker    = "worker"
	roleProjector = "projector"
)

func (c *ServeCmd) runs(role string) bool { return slices.Contains(c.Roles, role) }

// Validate checks the serve-only settings; Config and the embedded groups
// validate themselves.
func (c *ServeCmd) Validate() error {
	switch {
	case c.ClaimLease <= 0:
		return fmt.Errorf("REVIEWLEDGER_CLAIM_LEASE: must be a positive duration such as 10m, got %s", c.ClaimLease)
	case c.MaxInFlight < 0:
		return fmt.Errorf("REVIEWLEDGER_MAX_IN_FLIGHT: must not be negative, got %d", c.MaxInFlight)
	case c.ReadyMaxLag <= 0:
		return fmt.Errorf("REVIEWLEDGER_READY_MAX_LAG: must be a positive duration, got %s", c.ReadyMaxLag)
	case len(c.Roles) == 0:
		return fmt.Errorf("REVIEWLEDGER_ROLES: name at least one of api, worker, projector")
	}
	for _, r := range c.Roles {
		if r != roleAPI && r != roleWorker && r != roleProjector {
			return fmt.Errorf("REVIEWLEDGER_ROLES: unknown role %q (roles are api, worker, projector)", r)
		}
	}
	if (!c.runs(roleAPI) || !c.runs(roleWorker)) && c.Runner.PubSub == runner.PubSubGoChannel {
		return fmt.Errorf("REVIEWLEDGER_ROLES: api and worker in separate processes need REVIEWLEDGER_PUBSUB=postgres or nats; gochannel work never leaves its process")
	}
	return nil
}

// Run opens the database, applies pending migrations and runs every role
// until ctx is done (SIGINT or SIGTERM), then shuts down: the HTTP server
// first, then the workers and the projector.
func (c *ServeCmd) Run(ctx context.Context, log *slog.Logger) error {
	cfg := &c.Config
	pool, err := c.openPool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := migrate(ctx, pool, log); err != nil {
		return err
	}
	if len(cfg.Tokens) == 0 {
		log.Warn("REVIEWLEDGER_TOKENS is empty: every authenticated route answers 401")
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	store, closeStore, err := c.Store.open(ctx, pool, reg, log)
	if err != nil {
		return err
	}
	defer closeStore()
	led := ledger.New(store)
	readModels := projections.NewDB(pool)

	svc, stopProvider, err := c.Runner.NewRunner(cfg, pool, led, reg, log)
	if err != nil {
		return err
	}
	defer func() {
		if err := stopProvider(); err != nil {
			log.Warn("stop provider", "err", err)
		}
	}()
	projector, err := projections.NewRunner(projections.Config{Pool: pool, Store: store, Registerer: reg, Logger: log})
	if err != nil {
		return err
	}
	server, err := api.New(api.Config{
		Tokens:       cfg.Tokens,
		MaxBodyBytes: cfg.MaxBodyBytes,
		ClaimLease:   c.ClaimLease,
		MaxInFlight:  c.MaxInFlight,
		Classes:      cfg.Policy.Names(),
		Registry:     reg,
		Logger:       log,
	}, api.Deps{
		Ledger:     led,
		Reviews:    svc,
		ReadModels: readModels,
		Ready:      readiness(pool, projector, c.ReadyMaxLag),
		UI:         ui.Handler(),
	})
	if err != nil {
		return err
	}

	var roles []role
	if c.runs(roleAPI) {
		roles = append(roles, role{roleAPI, func(ctx context.Context) error { return server.ListenAndServe(ctx, cfg.Addr) }})
	}
	if c.runs(roleWorker) {
		roles = append(roles, role{roleWorker, svc.Run})
	}
	if c.runs(roleProjector) {
		roles = append(roles, role{roleProjector, projector.Run})
	}
	log.Info("serving", "addr", cfg.Addr, "version", version, "roles", c.Roles, "provider", cfg.Provider,
		"pubsub", c.Runner.PubSub, "eventstore", c.Store.Backend, "classes", cfg.Policy.Names())
	return runAll(ctx, log, roles...)
}

// openPool opens the database pool. Unless DATABASE_URL sets
// pool_max_conns, the pool is sized for the workers (each holds a connection
// for a few statements per attempt) plus the API and the projector; pgx's
// own default, the number of CPUs, starves the workers on a small machine.
func (c *ServeCmd) openPool(ctx context.Context) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(c.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	if !strings.Contains(c.DatabaseURL, "pool_max_conns") {
		pc.MaxConns = int32(max(16, c.Runner.Workers+8))
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	return pool, nil
}

// readiness is /readyz: the database answers and no projection lags more
// than maxLag behind the ledger.
func readiness(pool *pgxpool.Pool, projector *projections.Runner, maxLag time.Duration) []api.Check {
	return []api.Check{
		{Name: "database", Check: pool.Ping},
		{Name: "projections", Check: func(ctx context.Context) error {
			// The lag in seconds comes from the first event not yet
			// applied: reading one is enough, and an unauthenticated probe
			// must stay cheap however far behind the projections are.
			statuses, err := projector.Status(ctx, 1)
			if err != nil {
				return err
			}
			for _, st := range statuses {
				if lag := time.Duration(st.LagSeconds * float64(time.Second)); lag > maxLag {
					return fmt.Errorf("projection %s lags %s behind the ledger", st.Projection, lag.Round(time.Second))
				}
			}
			return nil
		}},
	}
}

// role is one long-running part of the process.
type role struct {
	name string
	run  func(ctx context.Context) error
}

// runAll runs every role until ctx is done or one of them fails; a failure
// stops the others. It returns the first failure.
func runAll(ctx context.Context, log *slog.Logger, roles ...role) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for _, r := range roles {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := r.run(ctx)
			if err != nil && !errors.Is(err, context.Canceled) {
				log.Error("role stopped", "role", r.name, "err", err)
				once.Do(func() { first = fmt.Errorf("%s: %w", r.name, err) })
			}
			cancel()
		}()
	}
	wg.Wait()
	return first
}
