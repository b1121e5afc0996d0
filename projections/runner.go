package projections

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/clock"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/storeerr"
)

// ErrInvalidConfig is wrapped by every configuration error; the message
// names the setting.
var ErrInvalidConfig = errors.New("invalid projection runner configuration")

// errCheckpointMoved means the stored checkpoint is not where the runner
// expected it (a rebuild swapped tables in, or another process advanced it),
// or holds another version: the runner reloads it and reads on from there,
// rebuilding first when the version is older than the code's.
var errCheckpointMoved = errors.New("projection checkpoint moved")

// errNewerVersion means the stored rows were built by a newer version of the
// projection than this code: this process leaves them alone.
var errNewerVersion = errors.New("projection rows were built by a newer version")

// Config configures a Runner.
type Config struct {
	// Pool holds the read models; required.
	Pool *pgxpool.Pool
	// Sessions is the pool whose connection settings the run locks'
	// connections use (advisory locks live in a server session, which a
	// transaction pooler in front of Pool would not keep); default Pool.
	Sessions *pgxpool.Pool
	// Store is the ledger; required. Any backend: the runner uses only the
	// eventstore.Store interface.
	Store eventstore.Store
	// Projections names the projections to run; every one when empty.
	Projections []string
	// BatchSize is how many events are read and committed together, for
	// every projection at once (default 5000, at most 100000).
	BatchSize int
	// PollInterval bounds the wait for new events when the store does not
	// wake the runner, and is how often a runner waiting for another
	// process's lock tries again (default 1s).
	PollInterval time.Duration
	// RetryDelay is the pause after a failed batch (default 2s).
	RetryDelay time.Duration
	// Settle is the pause, once a batch has reached the head of the
	// ledger, before the next read (default 100ms; negative: none): under
	// load the events of that time come as one batch, one transaction,
	// and a review that starts and ends in it writes no intermediate
	// rows. It adds at most Settle to the read models' lag; a runner
	// catching up reads on at once.
	Settle time.Duration
	// Registerer receives the runner's metrics, the service-level
	// indicators included (sli.go); none when nil.
	Registerer prometheus.Registerer
	// Classes are the policy's content classes: while this process runs
	// the SLO projection, their SLI series are exported from zero on.
	Classes []string
	// Logger; slog.Default() when nil.
	Logger *slog.Logger
	// Now is the clock used for lag; time.Now when nil.
	Now func() time.Time
}

func (c *Config) setDefaults() {
	if c.BatchSize == 0 {
		c.BatchSize = 5000
	}
	if c.PollInterval == 0 {
		c.PollInterval = time.Second
	}
	if c.Settle == 0 {
		c.Settle = 100 * time.Millisecond
	}
	if c.RetryDelay == 0 {
		c.RetryDelay = 2 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Validate checks the configuration; the error names the setting.
func (c Config) Validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%s: %s: %w", field, fmt.Sprintf(format, args...), ErrInvalidConfig)
	}
	switch {
	case c.Pool == nil:
		return bad("Pool", "required")
	case c.Store == nil:
		return bad("Store", "required")
	case c.BatchSize < 1 || c.BatchSize > 100000:
		return bad("BatchSize", "must be between 1 and 100000, got %d", c.BatchSize)
	case c.PollInterval < 0:
		return bad("PollInterval", "must not be negative, got %s", c.PollInterval)
	case c.RetryDelay < 0:
		return bad("RetryDelay", "must not be negative, got %s", c.RetryDelay)
	}
	if _, err := lookup(c.Projections...); err != nil {
		return fmt.Errorf("Projections: %w: %w", err, ErrInvalidConfig)
	}
	return nil
}

// Runner keeps projections current. Run it in every process that may serve
// projections: one process at a time runs each projection, the others wait
// for its lock and take over when that process dies. The projections a
// process runs share their batches: each batch is read once and applied to
// all of them in one transaction (see shared.go).
type Runner struct {
	cfg         Config
	projections []projection
	metrics     *metrics
	sli         *sliMetrics
	policies    *ledger.Policies

	// beforeCommit, when set (by tests), runs inside each batch's
	// transaction after every projection's rows are written and before the
	// checkpoints, with the names of the projections the batch moves; an
	// error aborts the batch.
	beforeCommit func(ctx context.Context, tx pgx.Tx, names []string) error
}

// NewRunner validates cfg and returns a runner.
func NewRunner(cfg Config) (*Runner, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ps, _ := lookup(cfg.Projections...)
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	sli, err := newSLIMetrics(cfg.Registerer, cfg.Pool)
	if err != nil {
		return nil, err
	}
	return &Runner{cfg: cfg, projections: ps, metrics: m, sli: sli, policies: ledger.NewPolicies(cfg.Store)}, nil
}

// Run keeps every configured projection current until ctx is done, then
// returns nil. Each projection whose lock this process holds joins the
// shared batch; errors are logged, counted and retried after RetryDelay.
func (r *Runner) Run(ctx context.Context) error {
	joins := make(chan *member)
	var wg sync.WaitGroup
	for _, p := range r.projections {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.hold(ctx, p, joins)
		}()
	}
	l := &loop{r: r, joins: joins, follow: true, leave: func(m *member, err error) error {
		m.done <- err
		return nil
	}}
	_ = l.run(ctx) // returns once ctx is done; every member has left
	wg.Wait()
	return nil
}

// CatchUp applies every event readable now to each configured projection
// and returns; it rebuilds a projection whose stored version is older than
// the code's first. It waits while another process holds a projection's
// lock. The projections share their batches as under Run.
func (r *Runner) CatchUp(ctx context.Context) error {
	return r.withLocks(ctx, r.projections, func(locks []*pgx.Conn) error {
		l := &loop{r: r}
		for i, p := range r.projections {
			pos, err := r.prepare(ctx, p)
			if err != nil {
				return err
			}
			l.add(r.newMember(p, locks[i], pos))
		}
		l.leave = func(m *member, err error) error {
			if !errors.Is(err, errCheckpointMoved) {
				return err
			}
			pos, err := r.prepare(ctx, m.p)
			if err != nil {
				return err
			}
			m.pos = pos
			l.add(m)
			return nil
		}
		return l.run(ctx)
	})
}

// CatchUpConcurrently is CatchUp with every projection caught up at the
// same time, as Run does. Since projections share their batches, that is
// what CatchUp does too; both remain for their callers.
func (r *Runner) CatchUpConcurrently(ctx context.Context) error { return r.CatchUp(ctx) }

// hold runs p while this process can: it waits for p's lock, prepares p
// (rebuilding it when its version changed) and hands it to the shared
// batch, until the batch lets it go. Errors are logged and counted, the
// lock released, and everything retried after RetryDelay.
func (r *Runner) hold(ctx context.Context, p projection, joins chan<- *member) {
	log := r.cfg.Logger.With("projection", p.name())
	for ctx.Err() == nil {
		err := r.withLock(ctx, p, func(lock *pgx.Conn) error {
			log.Info("projection running")
			for {
				pos, err := r.prepare(ctx, p)
				if err != nil {
					return err
				}
				m := r.newMember(p, lock, pos)
				m.done = make(chan error, 1)
				select {
				case joins <- m:
				case <-ctx.Done():
					return ctx.Err()
				}
				// The batch owns the lock connection until it lets m go,
				// which it does at the latest when ctx is done.
				if err := <-m.done; !errors.Is(err, errCheckpointMoved) || ctx.Err() != nil {
					return err
				}
			}
		})
		if ctx.Err() != nil {
			return
		}
		r.metrics.errors.WithLabelValues(p.name()).Inc()
		level := slog.LevelError
		if storeerr.Unavailable(err) {
			level = slog.LevelWarn // the database went away for a while: nothing to mend here
		}
		log.Log(ctx, level, "projection stopped; retrying", "err", err, "retry_in", r.cfg.RetryDelay)
		if clock.Sleep(ctx, r.cfg.RetryDelay) != nil {
			return
		}
	}
}

// prepare returns where p's checkpoint stands, creating it when p never
// ran and rebuilding p first when its stored version is older than the
// code's. A newer stored version is errNewerVersion: this process leaves
// those rows alone.
func (r *Runner) prepare(ctx context.Context, p projection) (eventstore.Position, error) {
	for {
		cp, err := ensureCheckpoint(ctx, r.cfg.Pool, p)
		if err != nil {
			return eventstore.Position{}, err
		}
		switch {
		case cp.version > p.version():
			return eventstore.Position{}, fmt.Errorf("projection %s: stored version %d, this code has %d: %w", p.name(), cp.version, p.version(), errNewerVersion)
		case cp.version < p.version():
			r.cfg.Logger.Info("projection version changed; rebuilding", "projection", p.name(), "from", cp.version, "to", p.version())
			if _, err := r.Rebuild(ctx, p.name()); err != nil {
				return eventstore.Position{}, err
			}
			continue
		}
		return cp.position, nil
	}
}
