package notify

import (
	"context"
	"fmt"
	"time"

	"github.com/reviewledger/reviewledger/eventstore/clock"
)

// pruneEvery is how often delivered deliveries older than Keep are
// deleted.
const pruneEvery = 10 * time.Minute

// stats measures the backlog every StatsInterval for the gauges, and
// deletes delivered deliveries older than Keep every pruneEvery, until ctx
// is done. A failed measurement is counted and logged, never fatal.
func (n *Notifier) stats(ctx context.Context) error {
	var pruned time.Time
	for {
		if err := n.measure(ctx); err != nil && ctx.Err() == nil {
			n.metrics.statsFailed.Inc()
			n.log.Warn("notify: measuring the backlog failed", "error", err)
		}
		if now := n.cfg.Now(); now.Sub(pruned) >= pruneEvery {
			if err := n.prune(ctx, now); err != nil && ctx.Err() == nil {
				n.log.Warn("notify: deleting old deliveries failed", "error", err)
			} else {
				pruned = now
			}
		}
		if clock.Sleep(ctx, n.cfg.StatsInterval) != nil {
			return nil
		}
	}
}

func (n *Notifier) measure(ctx context.Context) error {
	var pending, retrying, failed int64
	var oldest *time.Time
	err := n.cfg.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'pending'),
		count(*) FILTER (WHERE state = 'pending' AND attempts > 0),
		count(*) FILTER (WHERE state = 'failed'), min(created_at)
		FROM notify_delivery WHERE state <> 'delivered'`).Scan(&pending, &retrying, &failed, &oldest)
	if err != nil {
		return fmt.Errorf("backlog: %w", err)
	}
	n.metrics.pending.Set(float64(pending))
	n.metrics.retrying.Set(float64(retrying))
	n.metrics.failed.Set(float64(failed))
	age := 0.0
	if oldest != nil {
		age = max(0, n.cfg.Now().Sub(*oldest).Seconds())
	}
	n.metrics.oldest.Set(age)
	return nil
}

func (n *Notifier) prune(ctx context.Context, now time.Time) error {
	tag, err := n.cfg.Pool.Exec(ctx, `DELETE FROM notify_delivery WHERE state = 'delivered' AND created_at < $1`, now.Add(-n.cfg.Keep))
	if err != nil {
		return err
	}
	if tag.RowsAffected() > 0 {
		n.log.Info("notify: deleted delivered deliveries", "count", tag.RowsAffected(), "older_than", n.cfg.Keep)
	}
	return nil
}
