package projections

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/reviewledger/reviewledger/eventstore"
)

// ErrInvalidConfig is wrapped by every configuration error; the message
// names the setting.
var ErrInvalidConfig = errors.New("invalid projection runner configuration")

// errCheckpointMoved means the stored checkpoint is not where the runner
// expected it (a rebuild swapped tables in, or another process advanced it):
// the runner reloads it and reads on from there.
var errCheckpointMoved = errors.New("projection checkpoint moved")

// errNewerVersion means the stored rows were built by a newer version of the
// projection than this code: this process leaves them alone.
var errNewerVersion = errors.New("projection rows were built by a newer version")

// Config configures a Runner.
type Config struct {
	// Pool holds the read models; required.
	Pool *pgxpool.Pool
	// Store is the ledger; required. Any backend: the runner uses only the
	// eventstore.Store interface.
	Store eventstore.Store
	// Projections names the projections to run; every one when empty.
	Projections []string
	// BatchSize is how many events are read and committed together
	// (default 5000, at most 100000).
	BatchSize int
	// PollInterval bounds the wait for new events when the store does not
	// wake the runner, and is how often a runner waiting for another
	// process's lock tries again (default 1s).
	PollInterval time.Duration
	// RetryDelay is the pause after a failed batch (default 2s).
	RetryDelay time.Duration
	// Registerer receives the runner's metrics; none when nil.
	Registerer prometheus.Registerer
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
// for its lock and take over when that process dies.
type Runner struct {
	cfg         Config
	projections []projection
	metrics     *metrics
	cache       *batchCache

	// beforeCommit, when set (by tests), runs inside each batch's
	// transaction after the rows are written and before the checkpoint; an
	// error aborts the batch.
	beforeCommit func(ctx context.Context, tx pgx.Tx, name string, events int) error
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
	return &Runner{cfg: cfg, projections: ps, metrics: m, cache: newBatchCache(len(ps), 8)}, nil
}

// Run keeps every configured projection current until ctx is done, then
// returns nil. Errors are logged, counted and retried after RetryDelay.
func (r *Runner) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, p := range r.projections {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.runProjection(ctx, p)
		}()
	}
	wg.Wait()
	return nil
}

// CatchUp applies every event readable now to each configured projection
// and returns; it rebuilds a projection whose stored version differs from
// the code's first. It waits while another process holds a projection's
// lock.
func (r *Runner) CatchUp(ctx context.Context) error {
	for _, p := range r.projections {
		if err := r.withLock(ctx, p, func(lock *pgx.Conn) error { return r.serve(ctx, p, lock, false) }); err != nil {
			return err
		}
	}
	return nil
}

// CatchUpConcurrently is CatchUp with every projection caught up at the
// same time, as Run does.
func (r *Runner) CatchUpConcurrently(ctx context.Context) error {
	errs := make([]error, len(r.projections))
	var wg sync.WaitGroup
	for i, p := range r.projections {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = r.withLock(ctx, p, func(lock *pgx.Conn) error { return r.serve(ctx, p, lock, false) })
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (r *Runner) runProjection(ctx context.Context, p projection) {
	log := r.cfg.Logger.With("projection", p.name())
	for ctx.Err() == nil {
		err := r.withLock(ctx, p, func(lock *pgx.Conn) error {
			log.Info("projection running")
			return r.serve(ctx, p, lock, true)
		})
		if ctx.Err() != nil {
			return
		}
		r.metrics.errors.WithLabelValues(p.name()).Inc()
		log.Error("projection stopped; retrying", "err", err, "retry_in", r.cfg.RetryDelay)
		if sleep(ctx, r.cfg.RetryDelay) != nil {
			return
		}
	}
}

// lockKey is the advisory lock electing the one runner of a projection.
func lockKey(kind, name string) int64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "reviewledger.projection.%s.%s", kind, name)
	return int64(h.Sum64())
}

// withLock runs fn while holding p's run lock, waiting as long as another
// session holds it. The lock goes with the session: when a process dies,
// its connection closes and the next waiter takes over.
func (r *Runner) withLock(ctx context.Context, p projection, fn func(*pgx.Conn) error) error {
	return withAdvisoryLock(ctx, r.cfg.Pool, lockKey("run", p.name()), r.cfg.PollInterval, func(conn *pgx.Conn) error {
		r.metrics.active.WithLabelValues(p.name()).Set(1)
		defer r.metrics.active.WithLabelValues(p.name()).Set(0)
		return fn(conn)
	})
}

// withAdvisoryLock runs fn holding the session-level advisory lock key on a
// connection of its own, opened outside the pool so that waiting for or
// holding locks never takes a pooled connection from the work it guards.
// It waits, trying every retry, while another session holds the lock;
// closing the connection releases it.
func withAdvisoryLock(ctx context.Context, pool *pgxpool.Pool, key int64, retry time.Duration, fn func(*pgx.Conn) error) error {
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	if err != nil {
		return fmt.Errorf("open lock connection: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	for {
		var ok bool
		if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, key).Scan(&ok); err != nil {
			return fmt.Errorf("advisory lock: %w", err)
		}
		if ok {
			return fn(conn)
		}
		if err := sleep(ctx, retry); err != nil {
			return err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// serve runs p while this process holds its lock: it rebuilds p when its
// stored version is older than the code's, then applies batches from the
// checkpoint on. With follow false it returns once caught up.
func (r *Runner) serve(ctx context.Context, p projection, lock *pgx.Conn, follow bool) error {
	for {
		cp, err := ensureCheckpoint(ctx, r.cfg.Pool, p)
		if err != nil {
			return err
		}
		switch {
		case cp.version > p.version():
			return fmt.Errorf("projection %s: stored version %d, this code has %d: %w", p.name(), cp.version, p.version(), errNewerVersion)
		case cp.version < p.version():
			r.cfg.Logger.Info("projection version changed; rebuilding", "projection", p.name(), "from", cp.version, "to", p.version())
			if _, err := r.rebuild(ctx, p); err != nil {
				return err
			}
			continue
		}
		err = r.follow(ctx, p, lock, cp.position, follow)
		if errors.Is(err, errCheckpointMoved) {
			continue
		}
		return err
	}
}

// batch is one read of the global order, decoded.
type batch struct {
	after, last   eventstore.Position
	events        []event
	read          int // events read, including skipped ones
	skipped       int
	full          bool
	first, lastAt time.Time // recorded times of the first and last event read
	idle          bool      // no events: the reader caught up
	err           error
}

// follow applies batches starting after from. A reader goroutine reads and
// decodes ahead while the previous batch commits.
func (r *Runner) follow(ctx context.Context, p projection, lock *pgx.Conn, from eventstore.Position, follow bool) error {
	rctx, cancel := context.WithCancel(ctx)
	ch := make(chan batch, 2)
	var pending atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.read(rctx, from, ch, &pending)
	}()
	defer func() {
		cancel()
		for range ch { //nolint:revive // drain so the reader can exit
		}
		wg.Wait()
	}()

	name := p.name()
	lagEvents, lagSeconds := r.metrics.lagEvents.WithLabelValues(name), r.metrics.lagSeconds.WithLabelValues(name)
	ping := time.NewTicker(max(r.cfg.PollInterval, 100*time.Millisecond) * 5)
	defer ping.Stop()
	for {
		var (
			b  batch
			ok bool
		)
		select {
		case b, ok = <-ch:
			if !ok { // the reader stops only when ctx is done
				return ctx.Err()
			}
		case <-ping.C:
			// The lock lives as long as its session: make sure it still does.
			if err := lock.Ping(ctx); err != nil {
				return fmt.Errorf("projection %s: lock connection lost: %w", name, err)
			}
			continue
		case <-ctx.Done():
			return ctx.Err()
		}
		switch {
		case b.err != nil:
			return b.err
		case b.idle:
			lagEvents.Set(0)
			lagSeconds.Set(0)
			if !follow {
				return nil
			}
			continue
		}
		lagEvents.Set(float64(pending.Load()))
		lagSeconds.Set(max(0, r.cfg.Now().Sub(b.first).Seconds()))
		start := time.Now()
		n, err := r.applyBatch(ctx, p, b)
		if err != nil {
			return err
		}
		r.metrics.batch.WithLabelValues(name).Observe(time.Since(start).Seconds())
		r.metrics.events.WithLabelValues(name).Add(float64(n))
		r.metrics.skipped.WithLabelValues(name).Add(float64(b.skipped))
		if pending.Add(-int64(b.read)) == 0 && !b.full {
			lagEvents.Set(0)
			lagSeconds.Set(0)
		}
	}
}

// read sends batches read after from to ch until ctx is done or reading
// fails. When it finds no events it sends one idle batch and waits for the
// store to signal new ones, or PollInterval at most.
func (r *Runner) read(ctx context.Context, from eventstore.Position, ch chan<- batch, pending *atomic.Int64) {
	defer close(ch)
	send := func(b batch) bool {
		select {
		case ch <- b:
			return true
		case <-ctx.Done():
			return false
		}
	}
	pos, idle := from, false
	for ctx.Err() == nil {
		b := r.cache.get(ctx, pos, func() batch { return r.readBatch(ctx, pos) })
		if b.err != nil {
			if ctx.Err() == nil {
				send(b)
			}
			return
		}
		if b.read == 0 {
			if !idle && !send(batch{idle: true}) {
				return
			}
			idle = true
			wctx, cancel := context.WithTimeout(ctx, r.cfg.PollInterval)
			err := r.cfg.Store.WaitForEvents(wctx, pos)
			cancel()
			if err != nil && ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
				send(batch{err: fmt.Errorf("wait for events after %s: %w", pos, err)})
				return
			}
			continue
		}
		idle = false
		pending.Add(int64(b.read))
		if !send(b) {
			return
		}
		pos = b.last
	}
}

// readBatch reads and decodes the batch after pos; an empty batch (read 0)
// when there are no events.
func (r *Runner) readBatch(ctx context.Context, pos eventstore.Position) batch {
	recorded, err := r.cfg.Store.ReadAll(ctx, pos, r.cfg.BatchSize)
	if err != nil {
		return batch{err: fmt.Errorf("read ledger after %s: %w", pos, err)}
	}
	if len(recorded) == 0 {
		return batch{after: pos, last: pos}
	}
	events, skipped, err := decode(recorded)
	if err != nil {
		return batch{err: err}
	}
	last := recorded[len(recorded)-1]
	return batch{
		after: pos, last: last.Position, events: events, read: len(recorded), skipped: skipped,
		full: len(recorded) == r.cfg.BatchSize, first: recorded[0].RecordedAt, lastAt: last.RecordedAt,
	}
}

// applyBatch applies b to p's live tables and moves the checkpoint to the
// end of b in one transaction, and returns how many events it applied.
//
// The checkpoint row is locked first and must be where b starts. Events
// the checkpoint already covers are passed over, so applying a batch twice
// changes nothing; a checkpoint anywhere else is errCheckpointMoved.
func (r *Runner) applyBatch(ctx context.Context, p projection, b batch) (int, error) {
	var applied int
	err := pgx.BeginFunc(ctx, r.cfg.Pool, func(tx pgx.Tx) error {
		cp, err := lockCheckpoint(ctx, tx, p.name())
		if err != nil {
			return err
		}
		if cp.version != p.version() {
			return errCheckpointMoved
		}
		events, n := b.events, b.read
		if cp.position != b.after {
			if !cp.position.Less(b.last) {
				return nil // already applied
			}
			i := indexOf(events, cp.position)
			if i < 0 {
				return errCheckpointMoved
			}
			events = events[i+1:]
			n = len(events)
		}
		if err := p.apply(ctx, tx, liveTables, events); err != nil {
			return fmt.Errorf("projection %s: apply %d events after %s: %w", p.name(), len(events), b.after, err)
		}
		if r.beforeCommit != nil {
			if err := r.beforeCommit(ctx, tx, p.name(), len(events)); err != nil {
				return err
			}
		}
		applied = len(events)
		return advance(ctx, tx, p.name(), b.last, int64(n), b.lastAt)
	})
	if err != nil && !errors.Is(err, errCheckpointMoved) {
		return 0, fmt.Errorf("projection %s: batch after %s: %w", p.name(), b.after, err)
	}
	return applied, err
}

func indexOf(events []event, pos eventstore.Position) int {
	for i, e := range events {
		if e.position == pos {
			return i
		}
	}
	return -1
}
