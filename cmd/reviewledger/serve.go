package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/multitracer"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/reviewledger/reviewledger/api/contentaccess"
	"github.com/reviewledger/reviewledger/api/engine/hint"
	"github.com/reviewledger/reviewledger/api/httpapi"
	"github.com/reviewledger/reviewledger/api/notify"
	"github.com/reviewledger/reviewledger/api/queuefeed"
	"github.com/reviewledger/reviewledger/api/signin"
	"github.com/reviewledger/reviewledger/api/signin/pgsession"
	"github.com/reviewledger/reviewledger/api/ui"
	"github.com/reviewledger/reviewledger/eventstore/pgstore"
	"github.com/reviewledger/reviewledger/projections"
)

// ServeCmd runs the service: the API, the review engine (workers, deadline
// sweeper), and the projector, in one process.
type ServeCmd struct {
	Config `embed:""`
	Engine EngineConfig `embed:""`
	Store  StoreConfig  `embed:""`
	Notify NotifyConfig `embed:""`

	Audit AuditSigningConfig `embed:""` // audit checkpoints (audit_sign.go)
	Pools PoolConfig         `embed:""` // the connection budget (pools.go)
	Auth  SignInConfig       `embed:""` // token file, OpenID Provider (signin.go)

	ClaimLease   time.Duration `name:"claim-lease" env:"REVIEWLEDGER_CLAIM_LEASE" default:"10m" help:"How long a moderator's claim on a manual-queue item lasts."`
	MaxInFlight  int           `name:"max-in-flight" env:"REVIEWLEDGER_MAX_IN_FLIGHT" default:"0" help:"Admission ceiling: while this many reviews are in flight, submissions are answered 429 (0: no ceiling)."`
	ReadMaxLag   time.Duration `name:"read-max-lag" env:"REVIEWLEDGER_READ_MAX_LAG" default:"1s" help:"The read models are read from the primary while the replica (REVIEWLEDGER_READ_DATABASE_URL) lags more than this."`
	ReadyMaxLag  time.Duration `name:"ready-max-lag" env:"REVIEWLEDGER_READY_MAX_LAG" default:"30s" help:"/readyz fails while a projection lags more than this."`
	Roles        []string      `name:"roles" env:"REVIEWLEDGER_ROLES" default:"api,worker,projector" help:"Roles this process runs: api (HTTP API), worker (review engine: provider calls, parked reviews, and a candidate for the deadline sweeper and content purge, which one process at a time runs), projector (read models, and the decision webhooks when REVIEWLEDGER_NOTIFY_URL is set), sweeper (the sweeper's candidacy alone, for a process without workers). A process without api serves /healthz, /readyz and /metrics when REVIEWLEDGER_ADDR is free."`
	WorkerSweeps bool          `name:"worker-sweeps" env:"REVIEWLEDGER_WORKER_SWEEPS" default:"true" negatable:"" help:"Whether a worker process is also a candidate for the deadline sweeper and the content purge (one process at a time runs them); false leaves them to the processes with the sweeper role."`
	StopTimeout  time.Duration `name:"stop-timeout" env:"REVIEWLEDGER_STOP_TIMEOUT" default:"10s" help:"How long each role may take to stop on SIGTERM: the HTTP server finishing its requests, the engine closing its attempts."`
	DebugAddr    string        `name:"debug-addr" env:"REVIEWLEDGER_DEBUG_ADDR" help:"Address of Go's profiling endpoints (/debug/pprof/); off when empty. Bind it to loopback: it is not authenticated."`
}

// Roles a serve process can run.
const (
	roleAPI       = "api"
	roleWorker    = "worker"
	roleProjector = "projector"
	roleSweeper   = "sweeper"
)

// allRoles lists the roles, for messages.
const allRoles = "api, worker, projector, sweeper"

func (c *ServeCmd) runs(role string) bool { return slices.Contains(c.Roles, role) }

// Validate checks the serve-only settings; Config and the embedded groups
// validate themselves.
func (c *ServeCmd) Validate() error {
	switch {
	case c.ClaimLease <= 0:
		return fmt.Errorf("REVIEWLEDGER_CLAIM_LEASE: must be a positive duration such as 10m, got %s", c.ClaimLease)
	case c.MaxInFlight < 0:
		return fmt.Errorf("REVIEWLEDGER_MAX_IN_FLIGHT: must not be negative, got %d", c.MaxInFlight)
	case c.ReadMaxLag <= 0:
		return fmt.Errorf("REVIEWLEDGER_READ_MAX_LAG: must be a positive duration, got %s", c.ReadMaxLag)
	case c.ReadyMaxLag <= 0:
		return fmt.Errorf("REVIEWLEDGER_READY_MAX_LAG: must be a positive duration, got %s", c.ReadyMaxLag)
	case c.DebugAddr != "" && !validHostPort(c.DebugAddr):
		return fmt.Errorf("REVIEWLEDGER_DEBUG_ADDR: %q is not host:port", c.DebugAddr)
	case c.StopTimeout <= 0:
		return fmt.Errorf("REVIEWLEDGER_STOP_TIMEOUT: must be a positive duration such as 10s, got %s", c.StopTimeout)
	case len(c.Roles) == 0:
		return fmt.Errorf("REVIEWLEDGER_ROLES: name at least one of %s", allRoles)
	}
	if _, err := tracingEnabled(os.Getenv); err != nil {
		return err
	}
	for _, r := range c.Roles {
		if r != roleAPI && r != roleWorker && r != roleProjector && r != roleSweeper {
			return fmt.Errorf("REVIEWLEDGER_ROLES: unknown role %q (roles are %s)", r, allRoles)
		}
	}
	if (!c.runs(roleAPI) || !c.runs(roleWorker)) && c.Engine.PubSub == hint.PubSubGoChannel {
		return fmt.Errorf("REVIEWLEDGER_ROLES: api and worker in separate processes need REVIEWLEDGER_PUBSUB=postgres or nats; gochannel work never leaves its process")
	}
	_, err := c.budget()
	return err
}

// Run opens the database, applies pending migrations and runs every role
// until ctx is done (SIGINT or SIGTERM), then stops them in order: the HTTP
// server first (no new requests; those in progress, submissions included,
// finish), then the engine (calls in progress cancelled, their attempts
// closed, the reviews left pending for the next owner), then the
// projector.
func (c *ServeCmd) Run(ctx context.Context, log *slog.Logger) error {
	cfg := &c.Config
	tuneGC(os.Getenv, log)
	budget, err := c.budget()
	if err != nil {
		return err
	}
	dbs, err := c.openPools(ctx, budget, log)
	if err != nil {
		return err
	}
	defer dbs.Close()
	pool := dbs.Main
	if _, err := migrate(ctx, dbs.Sessions, log); err != nil {
		return err
	}
	tokens, err := c.Auth.allTokens(cfg.Tokens)
	if err != nil {
		return err
	}
	var verifier *signin.Verifier // only a process serving the API reads the provider's discovery
	if c.runs(roleAPI) {
		if verifier, err = c.Auth.verifier(ctx); err != nil {
			return err
		}
	}
	if len(tokens) == 0 && verifier == nil {
		log.Warn("REVIEWLEDGER_TOKENS is empty: every authenticated route answers 401")
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	store, closeStore, err := c.Store.open(ctx, dbs, reg, log)
	if err != nil {
		return err
	}
	defer closeStore()
	readModels := projections.NewDB(pool).WithObjectives(projections.Objectives(cfg.Policy))
	var replica *projections.Replica
	if dbs.Read != nil {
		replica = projections.NewReplica(pool, dbs.Read, c.ReadMaxLag, log)
		readModels = readModels.WithReplica(replica)
	}

	tracer, stopTracing, err := openTracing(ctx)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.StopTimeout)
		defer cancel()
		if err := stopTracing(sctx); err != nil {
			log.Warn("flush traces", "err", err)
		}
	}()
	c.Engine.StopTimeout, c.Engine.Tracer = c.StopTimeout, tracer
	eng, led, stopProvider, err := c.Engine.NewEngine(ctx, cfg, dbs, store, reg, log)
	if err != nil {
		return err
	}
	defer func() {
		if err := stopProvider(); err != nil {
			log.Warn("stop provider", "err", err)
		}
	}()
	signing, err := c.Audit.open(dbs, store, led, reg, log)
	if err != nil {
		return err
	}
	projector, err := projections.NewRunner(projections.Config{Pool: pool, Sessions: dbs.Sessions, Store: store, Registerer: reg, Logger: log, Classes: cfg.Policy.Names()})
	if err != nil {
		return err
	}
	notifier, err := c.Notify.newNotifier(dbs, store, led, reg, log)
	if err != nil {
		return err
	}
	sweeper, err := projections.NewSweeper(projections.SweepConfig{DB: readModels, Reviews: led, Registerer: reg, Logger: log})
	if err != nil {
		return err
	}
	feed := queuefeed.New(store, led, queuefeed.Config{})
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "reviewledger_queue_stream_skipped_events_total",
		Help: "Ledger events the manual-queue stream left out because they could not be read (a damaged history; audit verify names the review).",
	}, func() float64 { return float64(feed.Skipped.Load()) }))
	deps := httpapi.Deps{
		Ledger:     led,
		Reviews:    eng,
		ReadModels: readModels,
		Ready:      readiness(pool, projector, c.ReadyMaxLag),
		UI:         ui.Handler(),
		Watcher:    led.Watcher(),
		Deliveries: notify.NewDB(pool),
		Feed:       feed,

		ContentAccess: contentaccess.New(pool),

		Checkpoints: signing.checkpoints(), // nil without a signing key
	}
	if replica != nil {
		deps.ReadReplica = replica
	}
	if verifier != nil {
		deps.Tokens = verifier
	}
	sessions, err := c.Auth.sessions(ctx, verifier, pgsession.New(pool), log)
	if err != nil {
		return err
	}
	if sessions != nil {
		deps.Sessions = sessions
	}
	server, err := httpapi.New(httpapi.Config{
		Tokens:          tokens,
		MaxBodyBytes:    cfg.MaxBodyBytes,
		ClaimLease:      c.ClaimLease,
		ShutdownTimeout: c.StopTimeout,
		MaxInFlight:     c.MaxInFlight,
		Classes:         cfg.Policy.Names(),
		Registry:        reg,
		Logger:          log,
		Tracer:          tracer,
	}, deps)
	if err != nil {
		return err
	}

	var roles []role
	if c.DebugAddr != "" {
		roles = append(roles, role{"debug", func(ctx context.Context) error { return serveDebug(ctx, c.DebugAddr) }})
	}
	if c.runs(roleAPI) {
		roles = append(roles, role{roleAPI, func(ctx context.Context) error {
			// Long-polls are woken by changes made by any process: one
			// reader of the global order for all of them.
			go func() {
				if err := led.Watcher().Follow(ctx, time.Second); err != nil {
					log.Warn("long-polls are woken only by this process's changes", "error", err.Error())
				}
			}()
			// So are the streams of queue changes.
			go func() {
				if err := feed.Follow(ctx); err != nil {
					log.Warn("the queue event stream cannot follow the ledger", "error", err.Error())
				}
			}()
			go c.Auth.reloadTokens(ctx, cfg.Tokens, server, log)
			if replica != nil {
				// Checked every second (and by every /readyz): the read
				// models move to the replica once it is well, off it as
				// soon as it fails or lags.
				go func() { _ = replica.Run(ctx, time.Second) }()
			}
			return server.ListenAndServe(ctx, cfg.Addr)
		}})
	} else {
		roles = append(roles, role{"probes", func(ctx context.Context) error { return serveProbes(ctx, server, cfg.Addr, log) }})
	}
	switch {
	case c.runs(roleWorker) && (c.WorkerSweeps || c.runs(roleSweeper)):
		// Workers sweep too, as they always have: the sweeper is elected,
		// so every candidate waits and one sweeps at a time.
		roles = append(roles, role{roleWorker, eng.Run})
	case c.runs(roleWorker):
		roles = append(roles, role{roleWorker, eng.RunWorker})
		log.Info("this process works reviews and leaves the deadline sweeper to the processes with the sweeper role (REVIEWLEDGER_WORKER_SWEEPS=false)")
	case c.runs(roleSweeper):
		roles = append(roles, role{roleSweeper, eng.RunSweeper})
	}
	if c.runs(roleProjector) {
		roles = append(roles, role{roleProjector, projector.Run})
		// Expired claims and SLA breaches: any number of projectors may
		// sweep, each breach is counted once.
		roles = append(roles, role{"queue-sweeper", sweeper.Run})
		if notifier != nil {
			// Like a projection, a subscriber of the global order: one
			// process at a time sends, the others stand by.
			roles = append(roles, role{"notifier", notifier.Run})
		}
		roles = append(roles, signing.roles()...)
	}
	log.Info("serving", "addr", cfg.Addr, "version", version, "roles", c.Roles, "provider", cfg.Provider,
		"pubsub", c.Engine.PubSub, "eventstore", c.Store.Backend, "classes", cfg.Policy.Names(), "owner", eng.Owner(),
		"webhooks", notifier != nil && c.runs(roleProjector))
	return runInOrder(ctx, log, c.StopTimeout, roles...)
}

// serveProbes serves /healthz, /readyz and /metrics of a process without
// the api role on addr. A process without the api role never needed the
// address, so when another process (an api beside it) holds it, this one
// runs without probes and says so instead of failing to start.
func serveProbes(ctx context.Context, server *httpapi.Server, addr string, log *slog.Logger) error {
	err := server.ListenAndServeProbes(ctx, addr)
	if !errors.Is(err, syscall.EADDRINUSE) {
		return err
	}
	log.Warn("probes and metrics not served: the address is in use; set REVIEWLEDGER_ADDR to a free one to serve them", "addr", addr)
	<-ctx.Done()
	return nil
}

// newResettingPool opens a pool that closes its idle connections as soon
// as one statement finds its connection closed by the server (a restart,
// a failover): they are all as dead, and each would fail one request.
func newResettingPool(ctx context.Context, pc *pgxpool.Config) (*pgxpool.Pool, error) {
	lost := &pgstore.LostConnections{}
	if t := pc.ConnConfig.Tracer; t != nil {
		pc.ConnConfig.Tracer = multitracer.New(t, lost)
	} else {
		pc.ConnConfig.Tracer = lost
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, err
	}
	lost.Watch(pool)
	return pool, nil
}

// openReadPool opens the replica's pool: maxConns connections unless the
// URL sets pool_max_conns, and none until the first query, so that a
// replica that is down delays nothing.
func openReadPool(ctx context.Context, url string, maxConns int) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("REVIEWLEDGER_READ_DATABASE_URL: %w", err)
	}
	if !strings.Contains(url, "pool_max_conns") {
		pc.MaxConns = int32(maxConns)
	}
	named(pc)
	pool, err := newResettingPool(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("REVIEWLEDGER_READ_DATABASE_URL: %w", err)
	}
	return pool, nil
}

// readiness is /readyz: the database answers and no projection lags more
// than maxLag behind the ledger.
func readiness(pool *pgxpool.Pool, projector *projections.Runner, maxLag time.Duration) []httpapi.Check {
	return []httpapi.Check{
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

// runInOrder runs every role until ctx is done or one of them fails, then
// stops them one at a time, in the order given: each role's context is
// cancelled once the one before it has returned, so the HTTP server
// stops taking requests (and finishes those in progress) before the engine
// stops, and the engine before the projector. A role that does not return
// within stopTimeout after its turn is left behind, logged. It returns the
// first failure.
func runInOrder(ctx context.Context, log *slog.Logger, stopTimeout time.Duration, roles ...role) error {
	failed := make(chan struct{})
	var (
		once  sync.Once
		first error
	)
	fail := func(name string, err error) {
		once.Do(func() {
			first = fmt.Errorf("%s: %w", name, err)
			close(failed)
		})
	}
	stops := make([]context.CancelFunc, len(roles))
	dones := make([]chan struct{}, len(roles))
	for i, r := range roles {
		rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		stops[i], dones[i] = cancel, make(chan struct{})
		go func() {
			defer close(dones[i])
			if err := r.run(rctx); err != nil && !errors.Is(err, context.Canceled) {
				log.Error("role stopped", "role", r.name, "err", err)
				fail(r.name, err)
			}
		}()
	}
	select {
	case <-ctx.Done():
	case <-failed:
	}
	for i, r := range roles {
		stops[i]()
		t := time.NewTimer(stopTimeout + time.Second)
		select {
		case <-dones[i]:
		case <-t.C:
			log.Error("role did not stop in time; going on without it", "role", r.name, "timeout", stopTimeout)
		}
		t.Stop()
	}
	return first
}
