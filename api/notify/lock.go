package notify

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/clock"
	"github.com/reviewledger/reviewledger/eventstore/pglock"
)

// lockKey is the advisory lock electing the one active notifier.
const lockKey int64 = 0x726c6e6f74696679 // "rlnotify"

// LockKey is the advisory lock the active notifier holds, for telling who
// it is (pglock.Holders).
const LockKey = lockKey

// errLockLost: the lock's connection stopped answering, so another process
// may hold the lock now.
var errLockLost = errors.New("notifier lock connection lost")

// withLock runs fn while holding the notifier's lock, waiting, trying
// every retry, as long as another session holds it. The lock is held on a
// connection of its own, opened outside the pool, and lives as long as
// that session: when a process dies its connection closes and the next
// waiter takes over. The connection is pinged every retry while fn runs;
// when a ping fails fn's context is cancelled and withLock returns
// errLockLost.
func withLock(ctx context.Context, pool *pgxpool.Pool, retry time.Duration, fn func(context.Context) error) error {
	conn, err := pglock.Connect(ctx, pool) // named, for projections status
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	for {
		var ok bool
		if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, lockKey).Scan(&ok); err != nil {
			return fmt.Errorf("advisory lock: %w", err)
		}
		if ok {
			break
		}
		if err := clock.Sleep(ctx, retry); err != nil {
			return err
		}
	}
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
				cancel(fmt.Errorf("%w: %w", errLockLost, err))
				return
			}
		}
	}()
	err = fn(fctx)
	cancel(nil)
	<-pinged
	if cause := context.Cause(fctx); errors.Is(cause, errLockLost) && ctx.Err() == nil {
		return cause
	}
	return err
}

// unavailable reports whether err says the database could not be used for
// a while (the connection could not be made or was lost, the server is
// shutting down or starting, out of connections), rather than that
// something is wrong: the notifier retries either way, but only the
// latter is worth an error in the log.
func unavailable(err error) bool {
	if errors.Is(err, eventstore.ErrUnavailable) || errors.Is(err, errLockLost) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "57P01", "57P02", "57P03", "53300":
			return true
		}
		return len(pgErr.Code) == 5 && pgErr.Code[:2] == "08"
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connectErr) || errors.As(err, &netErr) || pgconn.SafeToRetry(err) || pgconn.Timeout(err) ||
		errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed)
}
