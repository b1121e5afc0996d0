package projections

import (
	"context"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/eventstore/pglock"
)

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
	return withAdvisoryLock(ctx, r.sessions(), lockKey("run", p.name()), r.cfg.PollInterval, func(conn *pgx.Conn) error {
		r.metrics.active.WithLabelValues(p.name()).Set(1)
		defer r.metrics.active.WithLabelValues(p.name()).Set(0)
		if p.name() == SLO {
			r.sli.start(r.cfg.Classes)
			defer r.sli.stop()
		}
		return fn(conn)
	})
}

// sessions is the pool whose settings the run locks' connections use.
func (r *Runner) sessions() *pgxpool.Pool {
	if r.cfg.Sessions != nil {
		return r.cfg.Sessions
	}
	return r.cfg.Pool
}

// withLocks runs fn holding the run locks of every one of ps, taken one
// after another in the order given (always all() order, so two processes
// waiting for the same locks never hold one each of what the other waits
// for).
func (r *Runner) withLocks(ctx context.Context, ps []projection, fn func([]*pgx.Conn) error) error {
	var take func(held []*pgx.Conn) error
	take = func(held []*pgx.Conn) error {
		if len(held) == len(ps) {
			return fn(held)
		}
		return r.withLock(ctx, ps[len(held)], func(conn *pgx.Conn) error { return take(append(held, conn)) })
	}
	return take(make([]*pgx.Conn, 0, len(ps)))
}

// withAdvisoryLock runs fn holding the session-level advisory lock key on
// a connection of its own (pglock.Acquire), waiting while another session
// holds it; closing the connection releases it.
func withAdvisoryLock(ctx context.Context, pool *pgxpool.Pool, key int64, retry time.Duration, fn func(*pgx.Conn) error) error {
	conn, release, err := pglock.Acquire(ctx, pool, key, retry)
	if err != nil {
		return err
	}
	defer release()
	return fn(conn)
}
