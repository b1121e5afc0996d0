package pgstore

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/eventstore/storeerr"
)

// read runs a read of the store, and runs it once more when it failed
// because the server had closed its connection (a restart, a failover, a
// backend terminated). The pool hands out an idle connection without
// checking it when it was used less than a second ago, so for a moment
// after a restart a read can be given a connection that is already dead;
// every other idle connection is then as dead, so the pool is reset (its
// idle connections closed, those in use closed when released) before the
// second run. Only reads come here: running one twice changes nothing.
// When the server is still down the second run fails connecting (at once
// when the connection is refused; within the connect timeout or the
// context's deadline when the host does not answer).
func (s *Store) read(ctx context.Context, run func() error) error {
	err := run()
	if err == nil || ctx.Err() != nil || !storeerr.ConnectionLost(err) {
		return err
	}
	s.pool.Reset()
	return run()
}

// LostConnections is a pgx tracer that resets a pool as soon as one of its
// statements finds its connection closed by the server
// (storeerr.ConnectionLost), or its server demoted to a standby
// (storeerr.Demoted: the connection is still open, so neither the pool
// nor the socket notices; dialled again, target_session_attrs finds the
// new primary): after a restart or a failover every connection the pool
// holds idle is as dead, and the pool would hand each out once more
// (unchecked when it was used less than a second ago), each to fail one
// request. It resets at most once a
// second: the connections in use at a reset are closed when released, so
// the others that fail with it need none. Set it as the pool's
// ConnConfig.Tracer, then give it the pool with Watch.
type LostConnections struct {
	pool      atomic.Pointer[pgxpool.Pool]
	lastReset atomic.Int64 // Unix nanoseconds
}

// Watch makes l reset pool.
func (l *LostConnections) Watch(pool *pgxpool.Pool) { l.pool.Store(pool) }

func (l *LostConnections) lost(conn *pgx.Conn, err error) {
	if err == nil || conn == nil || !storeerr.Demoted(err) && (!conn.IsClosed() || !storeerr.ConnectionLost(err)) {
		return
	}
	p := l.pool.Load()
	now, last := time.Now().UnixNano(), l.lastReset.Load()
	if p == nil || now-last < int64(time.Second) || !l.lastReset.CompareAndSwap(last, now) {
		return
	}
	p.Reset()
}

// TraceQueryStart implements pgx.QueryTracer.
func (l *LostConnections) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer.
func (l *LostConnections) TraceQueryEnd(_ context.Context, conn *pgx.Conn, data pgx.TraceQueryEndData) {
	l.lost(conn, data.Err)
}

// TraceBatchStart implements pgx.BatchTracer.
func (l *LostConnections) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

// TraceBatchQuery implements pgx.BatchTracer.
func (l *LostConnections) TraceBatchQuery(_ context.Context, conn *pgx.Conn, data pgx.TraceBatchQueryData) {
	l.lost(conn, data.Err)
}

// TraceBatchEnd implements pgx.BatchTracer.
func (l *LostConnections) TraceBatchEnd(_ context.Context, conn *pgx.Conn, data pgx.TraceBatchEndData) {
	l.lost(conn, data.Err)
}
