package notify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/reviewledger/reviewledger/api/engine/provider"
	"github.com/reviewledger/reviewledger/eventstore/clock"
	"github.com/reviewledger/reviewledger/eventstore/pglock"
	"github.com/reviewledger/reviewledger/eventstore/storeerr"
)

// Notifier sends the decision webhooks. Run it in every process that may
// send them: one at a time does, the others wait for its lock.
type Notifier struct {
	cfg     Config
	signer  *provider.Signer
	metrics *metrics
	log     *slog.Logger
}

// New validates cfg and returns a notifier. Pool, Store and Histories are
// required.
func New(cfg Config) (*Notifier, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Pool == nil || cfg.Store == nil || cfg.Histories == nil {
		return nil, fmt.Errorf("notify: Pool, Store and Histories are required: %w", ErrInvalidConfig)
	}
	signer, err := provider.NewSigner(cfg.Secret)
	if err != nil {
		return nil, fmt.Errorf("REVIEWLEDGER_NOTIFY_SECRET: %w: %w", err, ErrInvalidConfig)
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &Notifier{cfg: cfg, signer: signer, metrics: m, log: cfg.Logger.With("component", "notifier")}, nil
}

// Run sends webhooks until ctx is done, then returns nil: it waits for the
// notifier's lock, then follows the ledger, sends the due deliveries and
// measures the backlog, all three until ctx is done or one fails; a
// failure is logged and everything tried again after RetryDelay.
func (n *Notifier) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		err := pglock.Lead(ctx, n.cfg.sessions(), lockKey, n.cfg.PollInterval, n.active)
		if ctx.Err() != nil {
			return nil
		}
		level := slog.LevelError
		if storeerr.Unavailable(err) {
			level = slog.LevelWarn // the database went away for a while, or the lock session with it
		}
		n.log.Log(ctx, level, "notifier stopped; retrying", "error", err, "retry_in", n.cfg.RetryDelay)
		if clock.Sleep(ctx, n.cfg.RetryDelay) != nil {
			return nil
		}
	}
	return nil
}

// active runs the notifier's three loops while this process holds the
// lock, until ctx is done or one of them fails.
func (n *Notifier) active(ctx context.Context) error {
	n.metrics.active.Set(1)
	defer n.metrics.active.Set(0)
	n.log.Info("notifier active", "url", redactedURL(n.cfg.URL), "concurrency", n.cfg.Concurrency)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	kick := make(chan struct{}, 1)
	var wg sync.WaitGroup
	for _, loop := range []func(context.Context) error{
		func(ctx context.Context) error { return n.follow(ctx, kick) },
		func(ctx context.Context) error { return n.send(ctx, kick) },
		n.stats,
	} {
		wg.Go(func() {
			if err := loop(ctx); err != nil {
				cancel(err)
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
