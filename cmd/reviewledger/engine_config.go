package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/reviewledger/reviewledger/api/engine"
	"github.com/reviewledger/reviewledger/api/engine/hint"
	"github.com/reviewledger/reviewledger/api/engine/provider"
	"github.com/reviewledger/reviewledger/api/engine/work/pgwork"
	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/pglock"
)

// EngineConfig is the review engine's settings, embedded in the serve
// command. REVIEWLEDGER_SWEEP_INTERVAL is in Config.
type EngineConfig struct {
	Workers       int           `name:"workers" env:"REVIEWLEDGER_WORKERS" default:"256" help:"Provider calls this process makes at once (reviews waiting hold none)."`
	Lease         time.Duration `name:"lease" env:"REVIEWLEDGER_LEASE" default:"5s" help:"How long a review stays held by this process without renewal (renewed every fifth of it); a process that dies releases its reviews by then."`
	PollInterval  time.Duration `name:"poll-interval" env:"REVIEWLEDGER_POLL_INTERVAL" default:"1s" help:"How often due work is looked for when no message or timer brings it."`
	CommitBatch   int           `name:"commit-batch" env:"REVIEWLEDGER_COMMIT_BATCH" default:"256" help:"Most reviews written in one group commit."`
	CommitWindow  time.Duration `name:"commit-window" env:"REVIEWLEDGER_COMMIT_WINDOW" default:"0s" help:"Under load, how long a small group commit waits for more (0: none; a lone write never waits)."`
	CommitFlushes int           `name:"commit-flushes" env:"REVIEWLEDGER_COMMIT_FLUSHES" default:"1" help:"Group commits written at once; appends arriving meanwhile wait for the next (fewer: larger batches)."`
	// StopTimeout bounds the engine's writes when it stops; serve sets it.
	StopTimeout      time.Duration `kong:"-"`
	PubSub           string        `name:"pubsub" env:"REVIEWLEDGER_PUBSUB" default:"gochannel" help:"Work dispatch backend: gochannel (one process), postgres or nats."`
	NATSURL          string        `name:"nats-url" env:"REVIEWLEDGER_NATS_URL" default:"nats://127.0.0.1:4222" help:"NATS servers for --pubsub=nats: one URL, or several comma-separated (the members of a cluster; the client moves to another when one fails)."`
	NATSReplicas     int           `name:"nats-replicas" env:"REVIEWLEDGER_NATS_REPLICAS" default:"1" help:"Replicas of the JetStream work stream (1 to 5; above 1 needs a JetStream cluster with as many servers)."`
	Topic            string        `name:"work-topic" env:"REVIEWLEDGER_WORK_TOPIC" help:"Topic carrying review work (the JetStream stream for nats, the queue table for postgres); by default derived from the database name, so deployments with their own databases sharing one NATS server never take each other's work."`
	RetryBudget      float64       `name:"retry-budget" env:"REVIEWLEDGER_RETRY_BUDGET" default:"0.2" help:"Largest share of recent provider attempts that may be retries (0-1)."`
	RetryBudgetMin   int           `name:"retry-budget-min" env:"REVIEWLEDGER_RETRY_BUDGET_MIN" default:"50" help:"Retries always allowed per 10s window, whatever the share."`
	PayloadRetention time.Duration `name:"payload-retention" env:"REVIEWLEDGER_PAYLOAD_RETENTION" default:"720h" help:"How long reviewed content is kept after submission."`

	SimSeed         uint64        `name:"sim-seed" env:"REVIEWLEDGER_SIM_SEED" default:"1" help:"Simulator: random seed."`
	SimMedian       time.Duration `name:"sim-median-latency" env:"REVIEWLEDGER_SIM_MEDIAN_LATENCY" default:"200ms" help:"Simulator: median service time."`
	SimP99          time.Duration `name:"sim-p99-latency" env:"REVIEWLEDGER_SIM_P99_LATENCY" default:"2s" help:"Simulator: 99th percentile service time."`
	SimTimeoutRate  float64       `name:"sim-timeout-rate" env:"REVIEWLEDGER_SIM_TIMEOUT_RATE" default:"0.02" help:"Simulator: share of attempts that hang until their timeout."`
	SimErrorRate    float64       `name:"sim-error-rate" env:"REVIEWLEDGER_SIM_ERROR_RATE" default:"0.03" help:"Simulator: share of attempts answered 503."`
	SimInvalidRate  float64       `name:"sim-invalid-rate" env:"REVIEWLEDGER_SIM_INVALID_RATE" default:"0.01" help:"Simulator: share of attempts answered with an incomplete finding."`
	SimAsyncRate    float64       `name:"sim-async-rate" env:"REVIEWLEDGER_SIM_ASYNC_RATE" default:"0.1" help:"Simulator: share of attempts answered 202, the finding following by signed callback."`
	SimLateCallback float64       `name:"sim-late-callback-rate" env:"REVIEWLEDGER_SIM_LATE_CALLBACK_RATE" default:"0.05" help:"Simulator: share of callbacks sent after the attempt's timeout."`
	SimRejectRate   float64       `name:"sim-reject-rate" env:"REVIEWLEDGER_SIM_REJECT_RATE" default:"0.1" help:"Simulator: share of findings that reject."`

	// Tracer makes the reviews' spans; serve sets it (tracing.go).
	Tracer trace.TracerProvider `kong:"-"`
}

// Validate names the first setting at fault.
func (c EngineConfig) Validate() error {
	switch {
	case c.Workers < 1:
		return fmt.Errorf("REVIEWLEDGER_WORKERS: must be at least 1, got %d", c.Workers)
	case c.Lease < 100*time.Millisecond:
		return fmt.Errorf("REVIEWLEDGER_LEASE: must be at least 100ms, got %s", c.Lease)
	case c.PollInterval <= 0:
		return fmt.Errorf("REVIEWLEDGER_POLL_INTERVAL: must be a positive duration such as 1s, got %s", c.PollInterval)
	case c.CommitBatch < 1:
		return fmt.Errorf("REVIEWLEDGER_COMMIT_BATCH: must be at least 1, got %d", c.CommitBatch)
	case c.CommitFlushes < 1 || c.CommitFlushes > 64:
		return fmt.Errorf("REVIEWLEDGER_COMMIT_FLUSHES: must be between 1 and 64, got %d", c.CommitFlushes)
	case c.CommitWindow < 0 || c.CommitWindow > time.Second:
		return fmt.Errorf("REVIEWLEDGER_COMMIT_WINDOW: must be between 0s and 1s, got %s", c.CommitWindow)
	case c.PubSub != hint.PubSubGoChannel && c.PubSub != hint.PubSubPostgres && c.PubSub != hint.PubSubNATS:
		return fmt.Errorf("REVIEWLEDGER_PUBSUB: must be gochannel, postgres or nats, got %q", c.PubSub)
	case c.PubSub == hint.PubSubNATS && c.NATSURL == "":
		return fmt.Errorf("REVIEWLEDGER_NATS_URL: required with REVIEWLEDGER_PUBSUB=nats")
	case c.PubSub == hint.PubSubNATS && !validNATSURLs(c.NATSURL):
		return fmt.Errorf("REVIEWLEDGER_NATS_URL: want comma-separated nats://host:port URLs, got %q", c.NATSURL)
	case c.NATSReplicas < 1 || c.NATSReplicas > 5:
		return fmt.Errorf("REVIEWLEDGER_NATS_REPLICAS: must be between 1 and 5, got %d", c.NATSReplicas)
	case c.Topic != "" && !validTopic(c.Topic): // empty: the runner's default
		return fmt.Errorf("REVIEWLEDGER_WORK_TOPIC: must be 1 to %d letters, digits or underscores, got %q", maxTopicLen, c.Topic)
	case c.RetryBudget <= 0 || c.RetryBudget > 1:
		return fmt.Errorf("REVIEWLEDGER_RETRY_BUDGET: must be above 0 and at most 1, got %v", c.RetryBudget)
	case c.RetryBudgetMin < 1:
		return fmt.Errorf("REVIEWLEDGER_RETRY_BUDGET_MIN: must be at least 1, got %d", c.RetryBudgetMin)
	case c.PayloadRetention <= 0:
		return fmt.Errorf("REVIEWLEDGER_PAYLOAD_RETENTION: must be a positive duration such as 720h, got %s", c.PayloadRetention)
	}
	sim := c.Sim()
	sim.Deliver, sim.Signer = nil, nil
	sim.AsyncRate = 0 // checked here without its callback target
	if err := sim.Validate(); err != nil {
		return err
	}
	if c.SimAsyncRate < 0 || c.SimAsyncRate > 1 {
		return fmt.Errorf("REVIEWLEDGER_SIM_ASYNC_RATE: must be between 0 and 1, got %v", c.SimAsyncRate)
	}
	if sum := c.SimTimeoutRate + c.SimErrorRate + c.SimInvalidRate + c.SimAsyncRate; sum > 1 {
		return fmt.Errorf("REVIEWLEDGER_SIM_*_RATE: timeout + error + invalid + async must not exceed 1, got %v", sum)
	}
	return nil
}

// sweeperLockKey is the advisory lock electing the one deadline sweeper
// (and content purger) among the processes running the sweeper role.
var sweeperLockKey = pglock.Key("reviewledger.engine.sweeper")

// maxTopicLen keeps the PostgreSQL queue tables' names (a prefix and the
// topic) within PostgreSQL's 63-byte identifiers.
const maxTopicLen = 40

// defaultTopic is the work topic of a deployment whose database is named
// database: one topic per database, so two deployments sharing a NATS
// server do not take each other's review work.
func defaultTopic(database string) string {
	const prefix = "reviewledger_work_"
	b := []byte(database)
	for i, ch := range b {
		if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '_') {
			b[i] = '_'
		}
	}
	if len(b) == 0 {
		b = []byte("default")
	}
	return prefix + string(b[:min(len(b), maxTopicLen-len(prefix))])
}

// validNATSURLs: one or more comma-separated URLs, each with a host, as
// the NATS client takes them (a bare host:port means nats://).
func validNATSURLs(list string) bool {
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		if !strings.Contains(s, "://") {
			s = "nats://" + s
		}
		u, err := url.Parse(s)
		if err != nil || u.Host == "" || (u.Scheme != "nats" && u.Scheme != "tls" && u.Scheme != "ws" && u.Scheme != "wss") {
			return false
		}
	}
	return true
}

// validTopic: a JetStream stream name and part of a PostgreSQL identifier.
func validTopic(s string) bool {
	if s == "" || len(s) > maxTopicLen {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && r != '_' {
			return false
		}
	}
	return true
}

// Apply copies the settings into an engine configuration.
func (c EngineConfig) Apply(rc *engine.Config) {
	rc.Calls = c.Workers
	rc.Lease = c.Lease
	rc.PollInterval = c.PollInterval
	rc.StopTimeout = c.StopTimeout
	rc.RetryBudget = c.RetryBudget
	rc.RetryBudgetMinRetries = c.RetryBudgetMin
	rc.PayloadRetention = c.PayloadRetention
	rc.Tracer = c.Tracer
}

// Hints returns the settings of the work hints' transport on the database
// of pool: the work topic, when not set, derived from the database's name.
func (c EngineConfig) Hints(pool *pgxpool.Pool, log *slog.Logger) hint.Config {
	hc := hint.Config{PubSub: c.PubSub, Pool: pool, NATSURL: c.NATSURL, NATSReplicas: c.NATSReplicas, Topic: c.Topic, Logger: log}
	if hc.Topic == "" {
		hc.Topic = defaultTopic(pool.Config().ConnConfig.Database)
	}
	return hc
}

// Sim returns the simulator settings; the caller sets Deliver and Signer.
func (c EngineConfig) Sim() provider.SimConfig {
	return provider.SimConfig{
		Seed: c.SimSeed, MedianLatency: c.SimMedian, P99Latency: c.SimP99,
		TimeoutRate: c.SimTimeoutRate, ErrorRate: c.SimErrorRate, InvalidRate: c.SimInvalidRate,
		AsyncRate: c.SimAsyncRate, LateCallbackRate: c.SimLateCallback, RejectRate: c.SimRejectRate,
	}
}

// NewEngine builds the review engine for serve: its storage in the
// database of pool (work records, content, callback deliveries), the
// ledger over events committing through it (group commit as configured),
// its hints on the transport named by REVIEWLEDGER_PUBSUB (set up within
// ctx), the provider named by REVIEWLEDGER_PROVIDER, callbacks verified
// with REVIEWLEDGER_CALLBACK_SECRET (the simulator, when none is set, signs
// with a secret of its own). Run it with eng.Run(ctx); call stop after it
// returns. The ledger is the one every writer of the process uses.
func (c EngineConfig) NewEngine(ctx context.Context, cfg *Config, dbs pools, events eventstore.Store,
	reg prometheus.Registerer, log *slog.Logger) (eng *engine.Engine, led *ledger.Ledger, stop func() error, err error) {
	secret := cfg.CallbackSecret
	if secret == "" {
		secret = provider.NewSecret()
	}
	signer, err := provider.NewSigner(secret)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("REVIEWLEDGER_CALLBACK_SECRET: %w", err)
	}
	stop = func() error { return nil }
	var p provider.Provider
	switch cfg.Provider {
	case "http":
		if p, err = provider.NewHTTP(provider.HTTPConfig{URL: cfg.ProviderURL, MaxConns: c.Workers}); err != nil {
			return nil, nil, nil, err
		}
	default:
		sc := c.Sim()
		sc.Signer = signer
		sc.Deliver = func(ctx context.Context, reviewID string, h http.Header, body []byte) error {
			return eng.HandleCallback(ctx, reviewID, h, body)
		}
		sim, err := provider.NewSim(sc)
		if err != nil {
			return nil, nil, nil, err
		}
		p, stop = sim, sim.Close
	}
	named, stopNamed, err := c.upstreams(cfg, signer, func(ctx context.Context, reviewID string, h http.Header, body []byte) error {
		return eng.HandleCallback(ctx, reviewID, h, body)
	})
	if err != nil {
		_ = stop()
		return nil, nil, nil, err
	}
	stopDefault := stop
	stop = func() error { return errors.Join(stopDefault(), stopNamed()) }
	pool := dbs.Main
	store := pgwork.New(pool, events)
	led = store.Ledger(ledger.GroupCommit{MaxBatch: c.CommitBatch, Flushes: c.CommitFlushes, Window: c.CommitWindow})
	ec := engine.Config{
		Policy: cfg.Policy, Store: store, Ledger: led, Provider: p, Providers: named, Signer: signer,
		Logger: log, Metrics: reg, SweepInterval: cfg.SweepInterval, ProviderName: cfg.Provider,
	}
	c.Apply(&ec)
	ec.SweepLeader = func(ctx context.Context, fn func(context.Context) error) error {
		return pglock.Lead(ctx, dbs.Sessions, sweeperLockKey, time.Second, fn)
	}
	if ec.Hints, err = hint.Open(ctx, c.Hints(pool, log)); err != nil {
		_ = stop()
		return nil, nil, nil, err
	}
	if eng, err = engine.New(ec); err != nil {
		_ = ec.Hints.Close()
		_ = stop()
		return nil, nil, nil, err
	}
	return eng, led, stop, nil
}

// upstreams builds the policy file's named providers: an http adapter or a
// simulator each, with a signer for its callbacks (the default one's when
// it names no secret of its own; one signer per distinct secret, so that
// the engine can tell which providers a callback's signature belongs to).
// stop closes the simulators.
func (c EngineConfig) upstreams(cfg *Config, defaultSigner *provider.Signer,
	deliver func(ctx context.Context, reviewID string, h http.Header, body []byte) error) (map[string]engine.Upstream, func() error, error) {
	signers := map[string]*provider.Signer{cfg.CallbackSecret: defaultSigner}
	var stops []func() error
	stop := func() error {
		var errs []error
		for _, s := range stops {
			errs = append(errs, s())
		}
		return errors.Join(errs...)
	}
	out := make(map[string]engine.Upstream, len(cfg.Providers))
	for _, name := range slices.Sorted(maps.Keys(cfg.Providers)) {
		spec := cfg.Providers[name]
		u := spec.Upstream
		signer := defaultSigner
		if spec.Secret != "" {
			if signer = signers[spec.Secret]; signer == nil {
				var err error
				if signer, err = provider.NewSigner(spec.Secret); err != nil {
					_ = stop()
					return nil, nil, fmt.Errorf("REVIEWLEDGER_POLICY: provider %q: callback secret: %w", name, err)
				}
				signers[spec.Secret] = signer
			}
		}
		u.Signer = signer
		switch spec.Kind {
		case "http":
			p, err := provider.NewHTTP(provider.HTTPConfig{URL: spec.URL, MaxConns: cmp.Or(u.Concurrency, c.Workers)})
			if err != nil {
				_ = stop()
				return nil, nil, fmt.Errorf("REVIEWLEDGER_POLICY: provider %q: %w", name, err)
			}
			u.Provider = p
		default:
			sc := spec.Sim
			sc.Signer, sc.Deliver = signer, deliver
			sim, err := provider.NewSim(sc)
			if err != nil {
				_ = stop()
				return nil, nil, fmt.Errorf("REVIEWLEDGER_POLICY: provider %q: %w", name, err)
			}
			u.Provider = sim
			stops = append(stops, sim.Close)
		}
		out[name] = u
	}
	return out, stop, nil
}
