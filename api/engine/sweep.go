package engine

import (
	"context"
	"sync"

	"github.com/reviewledger/reviewledger/api/engine/provider"
	"github.com/reviewledger/reviewledger/api/engine/work"
)

const sweepBatch = 500

// Sweep escalates (reason deadline_passed, actor sweeper) every pending
// review whose deadline passed more than SweepGrace ago and that no live
// owner holds: it takes their records like any work and asks the decider
// as the sweeper, which closes an attempt left open (its owner's lease
// lapsed) as worker_lost, or a callback wait as deadline_exceeded, in the
// same append as the escalation. It returns how many reviews it took.
// A crashed owner therefore never strands a review for longer than its
// budget plus one sweep; with leases, a live owner's reviews are never
// swept.
func (e *Engine) Sweep(ctx context.Context) (int, error) {
	now := e.clock.Now()
	claimed, err := e.store.Claim(ctx, work.Query{Owner: e.cfg.Owner, LeaseUntil: now.Add(e.cfg.Lease), Now: now,
		Limit: sweepBatch, DeadlineBefore: now.Add(-e.cfg.SweepGrace)})
	if err != nil {
		return 0, err
	}
	e.metrics.claimed.WithLabelValues("sweep").Add(float64(len(claimed)))
	var wg sync.WaitGroup
	for _, c := range claimed {
		wg.Add(1)
		e.takeOne(c, now, true, wg.Done)
	}
	wg.Wait()
	return len(claimed), nil
}

// PurgePayloads deletes content stored longer than PayloadRetention whose
// review left the automated path, and callback deliveries older than twice
// the signature tolerance. It returns how many contents it deleted.
func (e *Engine) PurgePayloads(ctx context.Context) (int64, error) {
	now := e.clock.Now()
	n, err := e.store.PurgePayloads(ctx, now.Add(-e.cfg.PayloadRetention))
	if err != nil {
		return 0, err
	}
	return n, e.store.PurgeDeliveries(ctx, now.Add(-2*provider.SignatureTolerance))
}

// leadSweep runs the sweeper and the purge while this process is elected
// (always, without a SweepLeader), standing again after losing an election
// until ctx is done.
func (e *Engine) leadSweep(ctx context.Context) {
	if e.cfg.SweepLeader == nil {
		e.sweepAndPurge(ctx)
		return
	}
	for ctx.Err() == nil {
		err := e.cfg.SweepLeader(ctx, func(ctx context.Context) error {
			e.metrics.sweeperActive.Set(1)
			defer e.metrics.sweeperActive.Set(0)
			e.log.Info("elected deadline sweeper", "owner", e.cfg.Owner)
			e.sweepAndPurge(ctx)
			return nil
		})
		if err != nil && ctx.Err() == nil {
			e.metrics.storeErrors.Inc()
			e.log.Warn("deadline sweeper election; standing again", "error", err.Error())
			if e.clock.Sleep(ctx, e.cfg.PollInterval) != nil {
				return
			}
		}
	}
}

// sweepAndPurge runs the sweep and purge loops until ctx is done.
func (e *Engine) sweepAndPurge(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { e.sweepLoop(ctx) })
	wg.Go(func() { e.purgeLoop(ctx) })
	wg.Wait()
}

func (e *Engine) sweepLoop(ctx context.Context) {
	for {
		if n, err := e.Sweep(ctx); err != nil && ctx.Err() == nil {
			e.metrics.storeErrors.Inc()
			e.log.Warn("deadline sweep; retrying", "error", err.Error())
		} else if n > 0 {
			e.log.Info("deadline sweep took reviews past their deadline", "count", n)
		}
		if e.clock.Sleep(ctx, e.cfg.SweepInterval) != nil {
			return
		}
	}
}

func (e *Engine) purgeLoop(ctx context.Context) {
	for {
		if n, err := e.PurgePayloads(ctx); err != nil && ctx.Err() == nil {
			e.metrics.storeErrors.Inc()
			e.log.Warn("purge content; retrying later", "error", err.Error())
		} else if n > 0 {
			e.log.Info("purged content", "count", n)
		}
		if e.clock.Sleep(ctx, e.cfg.PurgeInterval) != nil {
			return
		}
	}
}
