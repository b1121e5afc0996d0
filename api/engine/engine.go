// Package engine is the review engine: it takes submissions, owns and works
// each review on the automated path (attempts against the provider within
// one end-to-end deadline, findings committed only at the revision their
// attempt started at, escalation of what runs out), and applies signed
// provider callbacks.
//
// What a review needs next is decided by domain.Next; the engine carries
// the steps out. A review is worked by the process holding its work record's
// lease (package work); a review waiting (backoff, Retry-After, a callback)
// is parked in its record, holding no goroutine and no worker, and is woken
// by a timer here or by any process's poll. docs/engine.md describes the
// design.
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/singleflight"

	"github.com/reviewledger/reviewledger/api/engine/provider"
	"github.com/reviewledger/reviewledger/api/engine/work"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/clock"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

// Errors returned by the Engine.
var (
	// ErrConflictingCompletion: a finding that cannot be committed because
	// its attempt is no longer the one in flight, the review moved on, or
	// its append failed the expected-revision check. It changes nothing.
	ErrConflictingCompletion = errors.New("conflicting completion")
	// ErrDeliveryInProgress: a copy of a callback delivery whose first
	// copy, handled by another process, stored no outcome while the copy
	// waited, and whose answer the ledger cannot give yet. Nothing was
	// done; the provider sends it again.
	ErrDeliveryInProgress = errors.New("callback delivery still being handled")
	// ErrShutdown is the cause given to the calls in progress when the
	// engine stops: their attempts end as cancelled and the reviews stay
	// pending for the next owner, never escalated.
	ErrShutdown = errors.New("engine shutting down")
	// ErrInvalidConfig names the engine setting at fault.
	ErrInvalidConfig = errors.New("invalid engine configuration")
)

// Config configures an Engine. Dependencies first, then settings; zero
// settings take the documented defaults.
type Config struct {
	Policy domain.Policy
	// Store keeps the work records, content and callback deliveries;
	// Ledger commits through it (ledger.Options{Committer: Store}), so
	// that a review's events and its record change together: New refuses
	// a Ledger that does not.
	Store  work.Store
	Ledger *ledger.Ledger
	// Provider is the default provider (domain.DefaultProvider), the one
	// of every class whose policy names none.
	Provider provider.Provider
	// Providers are the named providers the policy's classes route to
	// (primary and fallbacks) or shadow with, beside the default one.
	Providers map[string]Upstream
	// Signer verifies callbacks; without one every callback is refused as
	// ErrInvalidSignature.
	Signer *provider.Signer
	// Hints carries work hints between the processes that work reviews
	// (hints.go; the adapters are in package api/engine/hint). The engine
	// closes it when Run returns; when New fails, the caller closes it.
	Hints   Hints
	Logger  *slog.Logger          // default slog.Default()
	Metrics prometheus.Registerer // nil: metrics are kept but not registered
	Clock   clock.Clock           // default clock.System
	// Tracer makes the review's spans (trace.go); default the global
	// otel.GetTracerProvider(), which records nothing unless set.
	Tracer trace.TracerProvider

	// Owner names this process in the work records it holds. Default:
	// host name, process ID and a random suffix.
	Owner string
	// ProviderName labels the retry budget and metrics. Default "provider".
	ProviderName string
	// Calls bounds the provider calls made at once. Default 256.
	Calls int
	// Lease is how long a work record stays held without renewal. Default
	// 5s; renewed every Lease/5. A process that dies releases its reviews
	// by lease expiry.
	Lease time.Duration
	// PollInterval is how often due records are looked for when no hint
	// or timer wakes the engine. Default 1s.
	PollInterval time.Duration
	// SweepInterval is how often past-deadline reviews are escalated.
	// Default 5s. SweepGrace lets a live owner record its own outcome at
	// the deadline first. Default 500ms.
	SweepInterval time.Duration
	SweepGrace    time.Duration
	// RetryBudget is the share of recent attempts that may be retries.
	// Default 0.2. RetryBudgetWindow (default 10s) is "recent";
	// RetryBudgetMinRetries (default 50) retries are always allowed per
	// window.
	RetryBudget           float64
	RetryBudgetWindow     time.Duration
	RetryBudgetMinRetries int
	// PayloadRetention is how long content is kept after submission; it
	// is purged only once its review left the automated path. Default 720h.
	PayloadRetention time.Duration
	// PurgeInterval is how often content and old deliveries are purged.
	// Default 1h.
	PurgeInterval time.Duration
	// SweepLeader, when set, elects the one process of a deployment that
	// sweeps and purges: it runs fn while this process is elected
	// (waiting as long as another is), cancels fn's context when the
	// election is lost, and returns when ctx is done or fn returns. Nil:
	// this process sweeps unconditionally (racing sweepers are harmless,
	// only wasteful: expected revisions refuse the second escalation).
	SweepLeader func(ctx context.Context, fn func(context.Context) error) error
	// StopTimeout bounds the writes of a stopping engine (closing its
	// attempts, releasing its leases). Default 10s.
	StopTimeout time.Duration
}

func (c *Config) setDefaults() {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = clock.System{}
	}
	if c.Owner == "" {
		host, _ := os.Hostname()
		c.Owner = fmt.Sprintf("%s:%d:%s", host, os.Getpid(), uuid.NewString()[:8])
	}
	defaults := []struct {
		d   *time.Duration
		def time.Duration
	}{
		{&c.Lease, 5 * time.Second}, {&c.PollInterval, time.Second}, {&c.SweepInterval, 5 * time.Second},
		{&c.SweepGrace, 500 * time.Millisecond}, {&c.RetryBudgetWindow, 10 * time.Second},
		{&c.PayloadRetention, 720 * time.Hour}, {&c.PurgeInterval, time.Hour}, {&c.StopTimeout, 10 * time.Second},
	}
	for _, d := range defaults {
		if *d.d == 0 {
			*d.d = d.def
		}
	}
	if c.ProviderName == "" {
		c.ProviderName = "provider"
	}
	if c.Calls == 0 {
		c.Calls = 256
	}
	if c.RetryBudget == 0 {
		c.RetryBudget = 0.2
	}
	if c.RetryBudgetMinRetries == 0 {
		c.RetryBudgetMinRetries = 50
	}
}

// Validate names the first setting at fault.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrInvalidConfig)
	}
	switch {
	case c.Store == nil || c.Ledger == nil || c.Provider == nil || c.Hints == nil:
		return bad("engine: Store, Ledger, Provider and Hints are required")
	case !c.Ledger.CommitsThrough(c.Store):
		return bad("engine: Ledger must commit through Store (work.Store's Ledger method builds one), so that a review's events and its record change together")
	case c.Calls < 1:
		return bad("REVIEWLEDGER_WORKERS must be at least 1, got %d", c.Calls)
	case c.Lease < 100*time.Millisecond:
		return bad("REVIEWLEDGER_LEASE must be at least 100ms, got %s", c.Lease)
	case c.PollInterval < 0 || c.SweepInterval < 0 || c.SweepGrace < 0 || c.PurgeInterval < 0 || c.StopTimeout < 0:
		return bad("engine intervals must not be negative")
	case c.RetryBudget < 0 || c.RetryBudget > 1:
		return bad("REVIEWLEDGER_RETRY_BUDGET must be between 0 and 1, got %v", c.RetryBudget)
	case c.RetryBudgetWindow < 0 || c.RetryBudgetMinRetries < 0:
		return bad("REVIEWLEDGER_RETRY_BUDGET_WINDOW and _MIN_RETRIES must not be negative")
	case c.PayloadRetention < 0:
		return bad("REVIEWLEDGER_PAYLOAD_RETENTION must be positive, got %s", c.PayloadRetention)
	}
	return c.Policy.Validate()
}

// Engine is the review engine. Create it with New; Run works the reviews.
type Engine struct {
	cfg    Config
	ledger *ledger.Ledger
	// commands writes every step, finding and requeue (the application
	// service over the ledger).
	commands ledger.Commands
	store    work.Store
	log      *slog.Logger
	clock    clock.Clock
	metrics  *metrics
	// upstreams are the providers by name, the default one included.
	upstreams map[string]*upstream
	signers   []signerGroup // the callback secrets

	calls chan struct{} // provider call slots
	// deliveries runs one callback delivery of a webhook-id at a time in
	// this process: copies arriving while it runs get its answer.
	deliveries singleflight.Group

	mu   sync.Mutex
	jobs map[string]*job // reviews this process is working or has parked
	// active counts the jobs being worked; their goroutines are jobs.
	active    int
	working   sync.WaitGroup
	shadowing sync.WaitGroup // shadow calls (shadow.go)
	parked    timers         // wake-ups of parked jobs
	timerWake chan struct{}  // a wake-up earlier than the timer loop's
	cached    int            // bytes of content kept for parked jobs
	hints     hintSet

	// stopping is cancelled (cause ErrShutdown) when Run's context ends:
	// no step starts after it; calls in progress are cancelled.
	stopping context.Context
	stop     context.CancelCauseFunc
	stopAt   atomic.Int64 // unix nanoseconds of the stop
	running  atomic.Bool
	works    atomic.Bool // running, and taking work (Run or RunWorker)
	// renewFailing is set while lease renewals fail (the store is out):
	// a call then starts only once its own lease was renewed.
	renewFailing atomic.Bool

	// closePub closes the Hints port, once.
	closePub func() error

	outstanding outstanding
}

// New validates cfg and returns an Engine. Submit works at once; reviews
// are worked when Run is called.
func New(cfg Config) (*Engine, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ups, err := newUpstreams(cfg)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Metrics, cfg.Ledger)
	if err != nil {
		return nil, err
	}
	e := &Engine{
		cfg:       cfg,
		ledger:    cfg.Ledger,
		commands:  ledger.Commands{Ledger: cfg.Ledger, Now: cfg.Clock.Now},
		store:     cfg.Store,
		log:       cfg.Logger,
		clock:     cfg.Clock,
		metrics:   m,
		upstreams: ups,
		signers:   signerGroups(ups),
		calls:     make(chan struct{}, cfg.Calls),
		jobs:      make(map[string]*job),
		timerWake: make(chan struct{}, 1),
	}
	e.hints.init()
	e.stopping, e.stop = context.WithCancelCause(context.Background())
	e.closePub = sync.OnceValue(cfg.Hints.Close)
	return e, nil
}

// Owner returns the name this process holds work records under.
func (e *Engine) Owner() string { return e.cfg.Owner }

// InFlight returns the number of reviews being worked by this process now.
func (e *Engine) InFlight() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.active
}

// capacity is how many more reviews this process may take: twice its
// call slots, so that reviews committing a step do not leave slots idle.
func (e *Engine) capacity() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return max(0, 2*e.cfg.Calls-e.active)
}

// Run works reviews until ctx is done: it takes hinted and due work, wakes
// parked reviews, renews its leases, sweeps past-deadline reviews and purges
// old content. Then it stops in order: no new work is taken, the calls in
// progress are cancelled (their attempts closed as cancelled, the reviews
// left pending and due at once for the next owner), the leases still held
// are released, and Run returns once every review it worked is written,
// within Config.StopTimeout. The sweeper and the purge run only while
// elected (Config.SweepLeader, when set). Run, RunWorker or RunSweeper may
// be called once, one of them.
func (e *Engine) Run(ctx context.Context) error { return e.run(ctx, true, true) }

// RunWorker is Run without the deadline sweeper and the purge: this
// process works reviews, another sweeps (RunSweeper).
func (e *Engine) RunWorker(ctx context.Context) error { return e.run(ctx, true, false) }

// RunSweeper runs only the deadline sweeper and the purge (elected by
// Config.SweepLeader when set) until ctx is done: this process takes no
// other work. The reviews it sweeps are written and their leases released
// before it returns.
func (e *Engine) RunSweeper(ctx context.Context) error { return e.run(ctx, false, true) }

func (e *Engine) run(ctx context.Context, works, sweeps bool) error {
	if !e.running.CompareAndSwap(false, true) {
		return errors.New("engine: Run called twice")
	}
	e.works.Store(works)
	defer e.closePub() //nolint:errcheck // closing on the way out
	var stopHints func() error
	if works {
		var err error
		if stopHints, err = e.cfg.Hints.Subscribe(e.hint); err != nil {
			return fmt.Errorf("engine: dispatch: %w", err)
		}
	}
	// Leases are renewed until every review worked here is written, after
	// the other loops stop.
	renewCtx, stopRenewing := context.WithCancel(context.WithoutCancel(ctx))
	var loops, renewing sync.WaitGroup
	renewing.Go(func() { e.renewLoop(renewCtx) })
	if works {
		loops.Go(func() { e.claimLoop(ctx) })
		loops.Go(func() { e.timerLoop(ctx) })
	}
	if sweeps {
		loops.Go(func() { e.leadSweep(ctx) })
	}
	<-ctx.Done()

	var closeErr error
	if works {
		closeErr = stopHints()
	}
	e.stopAt.Store(e.clock.Now().UnixNano())
	e.stop(ErrShutdown)
	loops.Wait()
	e.working.Wait()
	e.shadowing.Wait()
	stopRenewing()
	renewing.Wait()
	e.releaseAll()
	if closeErr != nil {
		return fmt.Errorf("engine: close dispatch: %w", closeErr)
	}
	return nil
}

// stoppedAt is when the engine began to stop.
func (e *Engine) stoppedAt() time.Time { return time.Unix(0, e.stopAt.Load()) }

// releaseAll gives up the leases this process still holds (reviews taken
// but not started when the engine stopped), so the next owner need not
// wait for them to expire.
func (e *Engine) releaseAll() {
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.StopTimeout)
	defer cancel()
	if err := e.store.Release(ctx, e.cfg.Owner, nil, e.clock.Now()); err != nil {
		e.log.Warn("release leases on stop; they expire by themselves", "error", err.Error())
	}
}
