// Package runner is the review control path: it takes submissions, runs
// each review's attempts against the provider within one end-to-end
// deadline, commits findings conditionally, escalates what runs out, and
// applies signed provider callbacks. Work is dispatched through Watermill;
// a deadline sweeper and a resume on start make sure no review is stranded.
//
// docs/runner.md describes the design and its choices.
package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/reviewledger/reviewledger/api/provider"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

// Errors returned by the Service.
var (
	// ErrConflictingCompletion: a finding that cannot be committed because
	// its attempt is no longer the one in flight, the review moved on, or
	// its append failed the expected-revision check. It changes nothing.
	ErrConflictingCompletion = errors.New("conflicting completion")
	// ErrShutdown is the cause given to review contexts when the whole
	// runner stops: reviews are left pending for the next start, never
	// escalated.
	ErrShutdown = errors.New("runner shutting down")
	// ErrInvalidConfig names the runner setting at fault.
	ErrInvalidConfig = errors.New("invalid runner configuration")
)

// Pub/sub backends.
const (
	PubSubGoChannel = "gochannel"
	PubSubPostgres  = "postgres"
	PubSubNATS      = "nats"
)

// Config configures a Service. Dependencies first, then settings; zero
// settings take the documented defaults.
type Config struct {
	Policy   domain.Policy
	Ledger   *ledger.Ledger
	Pool     *pgxpool.Pool // runner tables (migrations 0010) and the postgres pub/sub
	Provider provider.Provider
	// Signer verifies callbacks; without one every callback is refused as
	// ErrInvalidSignature.
	Signer  *provider.Signer
	Logger  *slog.Logger          // default slog.Default()
	Metrics prometheus.Registerer // nil: metrics are kept but not registered
	Clock   Clock                 // default SystemClock
	// Rand draws backoff jitter; a seeded one in tests. Default: a PCG
	// seeded from the clock. Calls are serialised by the Service.
	Rand domain.Rand

	// ProviderName labels the retry budget and metrics. Default "provider".
	ProviderName string
	// Workers bounds the reviews run at once. Default 16.
	Workers int
	// PubSub is gochannel (default), postgres or nats.
	PubSub string
	// NATSURL is the NATS server for PubSub nats. Default nats://127.0.0.1:4222.
	NATSURL string
	// Topic carries review IDs to workers. Default "reviewledger_review_work".
	Topic string
	// SweepInterval is how often past-deadline reviews are escalated. Default 5s.
	SweepInterval time.Duration
	// SweepGrace lets a live worker record its own outcome at the deadline
	// before the sweeper does. Default 500ms.
	SweepGrace time.Duration
	// LostAttemptGrace is how long past its timeout an attempt started by
	// another worker is left alone before it is closed as worker_lost.
	// Default 2s.
	LostAttemptGrace time.Duration
	// RetryBudget is the share of recent attempts that may be retries.
	// Default 0.2. RetryBudgetWindow (default 10s) is "recent";
	// RetryBudgetMinRetries (default 50) retries are always allowed per
	// window, so a quiet service retries freely and the budget bites only
	// under load, when retries would multiply an outage.
	RetryBudget           float64
	RetryBudgetWindow     time.Duration
	RetryBudgetMinRetries int
	// PayloadRetention is how long content is kept after submission; it
	// is purged only once its review left the automated path. Default 720h.
	PayloadRetention time.Duration
	// PurgeInterval is how often payloads and old webhook IDs are purged. Default 1h.
	PurgeInterval time.Duration
}

func (c *Config) setDefaults() {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = SystemClock{}
	}
	if c.Rand == nil {
		seed := uint64(c.Clock.Now().UnixNano())
		c.Rand = rand.New(rand.NewPCG(seed, seed>>1))
	}
	if c.ProviderName == "" {
		c.ProviderName = "provider"
	}
	if c.Workers == 0 {
		c.Workers = 16
	}
	if c.PubSub == "" {
		c.PubSub = PubSubGoChannel
	}
	if c.NATSURL == "" {
		c.NATSURL = "nats://127.0.0.1:4222"
	}
	if c.Topic == "" {
		c.Topic = "reviewledger_review_work"
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = 5 * time.Second
	}
	if c.SweepGrace == 0 {
		c.SweepGrace = 500 * time.Millisecond
	}
	if c.LostAttemptGrace == 0 {
		c.LostAttemptGrace = 2 * time.Second
	}
	if c.RetryBudget == 0 {
		c.RetryBudget = 0.2
	}
	if c.RetryBudgetWindow == 0 {
		c.RetryBudgetWindow = 10 * time.Second
	}
	if c.RetryBudgetMinRetries == 0 {
		c.RetryBudgetMinRetries = 50
	}
	if c.PayloadRetention == 0 {
		c.PayloadRetention = 720 * time.Hour
	}
	if c.PurgeInterval == 0 {
		c.PurgeInterval = time.Hour
	}
}

// Validate names the first setting at fault.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrInvalidConfig)
	}
	switch {
	case c.Ledger == nil:
		return bad("runner: Ledger is required")
	case c.Pool == nil:
		return bad("runner: Pool is required")
	case c.Provider == nil:
		return bad("runner: Provider is required")
	case c.Workers < 1:
		return bad("REVIEWLEDGER_WORKERS must be at least 1, got %d", c.Workers)
	case c.PubSub != PubSubGoChannel && c.PubSub != PubSubPostgres && c.PubSub != PubSubNATS:
		return bad("REVIEWLEDGER_PUBSUB must be gochannel, postgres or nats, got %q", c.PubSub)
	case c.SweepInterval < 0:
		return bad("REVIEWLEDGER_SWEEP_INTERVAL must be positive, got %s", c.SweepInterval)
	case c.SweepGrace < 0 || c.LostAttemptGrace < 0:
		return bad("runner grace periods must not be negative")
	case c.RetryBudget < 0 || c.RetryBudget > 1:
		return bad("REVIEWLEDGER_RETRY_BUDGET must be between 0 and 1, got %v", c.RetryBudget)
	case c.RetryBudgetWindow < 0 || c.RetryBudgetMinRetries < 0:
		return bad("REVIEWLEDGER_RETRY_BUDGET_WINDOW and _MIN_RETRIES must not be negative")
	case c.PayloadRetention < 0:
		return bad("REVIEWLEDGER_PAYLOAD_RETENTION must be positive, got %s", c.PayloadRetention)
	case c.PurgeInterval < 0:
		return bad("runner purge interval must be positive, got %s", c.PurgeInterval)
	}
	if err := c.Policy.Validate(); err != nil {
		return err
	}
	return nil
}

// Service is the review runner. Create it with New; Run works the reviews.
type Service struct {
	cfg     Config
	ledger  *ledger.Ledger
	state   *pgState
	log     *slog.Logger
	clock   Clock
	metrics *metrics
	budget  *retryBudget
	waiters *waiters

	randMu sync.Mutex
	rand   domain.Rand

	publisher  message.Publisher
	subscriber message.Subscriber
	closePub   func() error
	pubMu      sync.RWMutex // guards publishing against closePub
	pubClosed  bool

	slots       chan struct{} // worker pool
	runMu       sync.Mutex
	running     map[string]bool
	inFlight    atomic.Int64
	outstanding outstanding
	runCtx      context.Context
	stopRuns    context.CancelCauseFunc
	runs        sync.WaitGroup
	running1    atomic.Bool
}

// New validates cfg and returns a Service. Submit publishes work at once;
// reviews run when Run is called (and any submitted before are resumed
// then).
func New(cfg Config) (*Service, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Metrics)
	if err != nil {
		return nil, err
	}
	s := &Service{
		cfg:     cfg,
		ledger:  cfg.Ledger,
		state:   &pgState{pool: cfg.Pool},
		log:     cfg.Logger,
		clock:   cfg.Clock,
		metrics: m,
		rand:    cfg.Rand,
		waiters: newWaiters(),
		slots:   make(chan struct{}, cfg.Workers),
		running: make(map[string]bool),
	}
	s.budget = newRetryBudget(cfg.RetryBudget, cfg.RetryBudgetWindow, cfg.RetryBudgetMinRetries)
	s.runCtx, s.stopRuns = context.WithCancelCause(context.Background())
	if err := s.openPubSub(); err != nil {
		return nil, err
	}
	closePub := s.closePub
	s.closePub = func() error {
		s.pubMu.Lock()
		defer s.pubMu.Unlock()
		if s.pubClosed {
			return nil
		}
		s.pubClosed = true
		return closePub()
	}
	return s, nil
}

// InFlight returns the number of reviews being worked now, for admission
// control.
func (s *Service) InFlight() int { return int(s.inFlight.Load()) }

// Int64N draws jitter; the injected source need not be safe for
// concurrent use.
func (s *Service) Int64N(n int64) int64 {
	s.randMu.Lock()
	defer s.randMu.Unlock()
	return s.rand.Int64N(n)
}

// Run dispatches work to the worker pool, resumes pending reviews, and runs
// the deadline sweeper and the payload purge until ctx is done. Then it
// stops taking work, stops the reviews being worked (they stay pending and
// are resumed by the next start: see ErrShutdown) and returns once they
// have. Run may be called once.
func (s *Service) Run(ctx context.Context) error {
	if !s.running1.CompareAndSwap(false, true) {
		return errors.New("runner: Run called twice")
	}
	defer s.closePub() //nolint:errcheck // closing on the way out
	router, err := s.newRouter()
	if err != nil {
		return err
	}
	routerCtx, stopRouter := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRouter()
	routerDone := make(chan error, 1)
	go func() { routerDone <- router.Run(routerCtx) }()
	select {
	case <-router.Running():
	case err := <-routerDone:
		return fmt.Errorf("runner: dispatch: %w", err)
	case <-ctx.Done():
	}

	var loops sync.WaitGroup
	loops.Go(func() { s.resume(ctx) })
	loops.Go(func() { s.sweepLoop(ctx) })
	loops.Go(func() { s.purgeLoop(ctx) })
	<-ctx.Done()
	loops.Wait()

	// Stop taking work first, then stop the reviews in progress. Taking
	// runMu orders every hand-off already made before the subscriber's
	// shutdown (watermill-nats closes its output channel without
	// synchronising with its senders; see docs/runner.md).
	s.runMu.Lock()
	//lint:ignore SA2001 an empty critical section is the point
	s.runMu.Unlock()
	closeErr := router.Close()
	stopRouter()
	<-routerDone
	s.stopRuns(ErrShutdown)
	s.runs.Wait()
	if closeErr != nil {
		return fmt.Errorf("runner: close dispatch: %w", closeErr)
	}
	return nil
}

// dispatch hands a review to the worker pool, waiting for a free worker.
// A review already being worked in this process is not started twice.
func (s *Service) dispatch(ctx context.Context, reviewID string) {
	s.runMu.Lock()
	if s.running[reviewID] {
		s.runMu.Unlock()
		return
	}
	s.running[reviewID] = true
	s.runMu.Unlock()
	release := func() {
		s.runMu.Lock()
		delete(s.running, reviewID)
		s.runMu.Unlock()
	}
	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		release()
		return
	case <-s.runCtx.Done():
		release()
		return
	}
	s.runs.Add(1)
	go func() {
		defer s.runs.Done()
		defer func() { <-s.slots }()
		defer release()
		if err := s.Review(s.runCtx, reviewID); err != nil && !errors.Is(err, ErrShutdown) {
			s.log.Error("review run failed", "review_id", reviewID, "error", err.Error())
		}
	}()
}

// Pool returns the database pool the runner keeps its tables in.
func (s *Service) Pool() *pgxpool.Pool { return s.cfg.Pool }
