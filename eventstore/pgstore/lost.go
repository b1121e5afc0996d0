package pgstore

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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
	if err == nil || ctx.Err() != nil || !connectionLost(err) {
		return err
	}
	s.pool.Reset()
	return run()
}

// connectionLost reports whether err says that an established connection
// was closed under the statement: the server's word that it terminated
// the session (admin or crash shutdown), or the socket closed or reset.
// Errors of connecting, of timeouts and of the statement itself (no rows,
// scanning, encoding, the server refusing it) are not.
func connectionLost(err error) bool {
	var connectErr *pgconn.ConnectError
	if err == nil || errors.As(err, &connectErr) {
		return false
	}
	if code := storeerr.Code(err); code != "" {
		return code == storeerr.CodeAdminShutdown || code == storeerr.CodeCrashShutdown
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// demoted reports whether err is the server refusing a write because it
// is a standby (read_only_sql_transaction): the primary this connection
// was made to has been demoted in a failover, and another server takes
// the writes now. The connection itself is still open, so neither the
// pool nor the socket notices: every connection to that server, idle or
// in use, must be dropped and dialled again (target_session_attrs then
// finds the new primary), and the write is retried like one that lost
// its connection. A transaction a client declared READ ONLY itself never
// writes, so on the primary this code is not met.
func demoted(err error) bool {
	return storeerr.Code(err) == storeerr.CodeReadOnlySQLTransaction
}

// LostConnections is a pgx tracer that resets a pool as soon as one of its
// statements finds its connection closed by the server, or its server
// demoted to a standby (demoted): after a restart or a failover every
// connection the pool holds idle is as dead, and the
// pool would hand each out once more (unchecked when it was used less
// than a second ago), each to fail one request. It resets at most once a
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
	if err == nil || conn == nil || !demoted(err) && (!conn.IsClosed() || !connectionLost(err)) {
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
