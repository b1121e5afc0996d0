// Package pglock elects one process for a job with a PostgreSQL
// session-level advisory lock, and tells who holds such a lock.
//
// A lock is held on a connection of its own, opened outside the pool, so
// that waiting for or holding it never takes a pooled connection from the
// work it guards. The lock goes with the session: when the process dies,
// the server closes its connection and the next waiter takes the lock
// within its retry interval. Lock connections carry an application_name
// naming the process (AppName), so that Holders can say, from
// pg_locks and pg_stat_activity, which process is active.
package pglock

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/eventstore/clock"
)

// ErrLost: the lock's connection stopped answering while the job ran, so
// another process may hold the lock now.
var ErrLost = errors.New("advisory lock connection lost")

// Key derives an advisory lock key from a name.
func Key(name string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	return int64(h.Sum64())
}

// AppName is the application_name of this process's lock connections:
// "reviewledger <host>:<pid>".
func AppName() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("reviewledger %s:%d", host, os.Getpid())
}

// Connect opens a connection to pool's database outside the pool, named
// AppName.
func Connect(ctx context.Context, pool *pgxpool.Pool) (*pgx.Conn, error) {
	cc := pool.Config().ConnConfig.Copy()
	cc.RuntimeParams["application_name"] = AppName()
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("open lock connection: %w", err)
	}
	return conn, nil
}

// Lead runs fn while this process holds the advisory lock key, waiting,
// trying every retry, as long as another session holds it. While fn runs
// the lock's connection is pinged every retry; when a ping fails, fn's
// context is cancelled and Lead returns ErrLost (wrapped). It returns when
// ctx is done or fn returns; the lock is released on the way out.
func Lead(ctx context.Context, pool *pgxpool.Pool, key int64, retry time.Duration, fn func(context.Context) error) error {
	conn, release, err := Acquire(ctx, pool, key, retry)
	if err != nil {
		return err
	}
	defer release()
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	pinged := make(chan struct{})
	go func() {
		defer close(pinged)
		for clock.Sleep(fctx, retry) == nil {
			pctx, pcancel := context.WithTimeout(fctx, retry+5*time.Second)
			err := conn.Ping(pctx)
			pcancel()
			if err != nil && fctx.Err() == nil {
				cancel(fmt.Errorf("%w: %w", ErrLost, err))
				return
			}
		}
	}()
	err = fn(fctx)
	cancel(nil)
	<-pinged
	if cause := context.Cause(fctx); errors.Is(cause, ErrLost) && ctx.Err() == nil {
		return cause
	}
	return err
}

// Acquire takes the advisory lock key on a connection of its own (named
// by AppName, opened outside the pool so that waiting for or holding a
// lock never takes a pooled connection from the work it guards), waiting,
// trying every retry, while another session holds it. The lock lives as
// long as the session: release closes the connection, and a process that
// dies releases it with its connection.
func Acquire(ctx context.Context, pool *pgxpool.Pool, key int64, retry time.Duration) (*pgx.Conn, func(), error) {
	conn, err := Connect(ctx, pool)
	if err != nil {
		return nil, nil, err
	}
	release := func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}
	for {
		var ok bool
		if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, key).Scan(&ok); err != nil {
			release()
			return nil, nil, fmt.Errorf("advisory lock: %w", err)
		}
		if ok {
			return conn, release, nil
		}
		if err := clock.Sleep(ctx, retry); err != nil {
			release()
			return nil, nil, err
		}
	}
}

// Holder is the session holding an advisory lock.
type Holder struct {
	// App is the session's application_name: AppName of the process for
	// the locks taken here.
	App string
	// PID is the server process of the session; Since when it connected.
	PID   int
	Since time.Time
}

// String names the holder: its application name and server process.
func (h Holder) String() string { return fmt.Sprintf("%s (backend %d)", h.App, h.PID) }

// Querier runs a query: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Holders returns the sessions holding each of keys in the current
// database; a key no session holds is absent.
func Holders(ctx context.Context, q Querier, keys ...int64) (map[int64]Holder, error) {
	// A bigint advisory key shows in pg_locks as classid (its high 32 bits)
	// and objid (its low 32 bits), with objsubid 1.
	rows, err := q.Query(ctx, `
SELECT (l.classid::bigint << 32) | l.objid::bigint, coalesce(a.application_name, ''), a.pid, a.backend_start
FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`)
	if err != nil {
		return nil, fmt.Errorf("advisory lock holders: %w", err)
	}
	want := make(map[int64]bool, len(keys))
	for _, k := range keys {
		want[k] = true
	}
	out := make(map[int64]Holder)
	for rows.Next() {
		var (
			key   int64
			h     Holder
			since *time.Time // hidden (NULL) for another role's sessions without pg_read_all_stats
		)
		if err := rows.Scan(&key, &h.App, &h.PID, &since); err != nil {
			rows.Close()
			return nil, fmt.Errorf("advisory lock holders: %w", err)
		}
		if since != nil {
			h.Since = *since
		}
		if want[key] {
			out[key] = h
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("advisory lock holders: %w", err)
	}
	return out, nil
}
