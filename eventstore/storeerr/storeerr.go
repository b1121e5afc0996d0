// Package storeerr is the one place that reads PostgreSQL's errors: it
// tells a database gone away from a database that refused something
// (Unavailable, the test every component that retries its database work
// uses to choose between a warning and an error in the log), and, more
// narrowly, a connection lost under a statement (ConnectionLost) and a
// primary demoted to a standby (Demoted); names the SQLSTATEs the packages
// act on (Code, with the constraint and the message a refusal names:
// Constraint, Message); and translates a driver error at a package's edge
// (Wrap), so that no pgx type reaches callers.
package storeerr

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"

	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/pglock"
)

// SQLSTATEs the packages act on
// (https://www.postgresql.org/docs/current/errcodes-appendix.html).
const (
	// Unavailable: the server could not be used for a while.
	CodeReadOnlySQLTransaction = "25006" // read_only_sql_transaction: a standby, the primary demoted under the connection
	CodeTooManyConnections     = "53300" // too_many_connections
	CodeAdminShutdown          = "57P01" // admin_shutdown: the session terminated, the server stopping
	CodeCrashShutdown          = "57P02" // crash_shutdown
	CodeCannotConnectNow       = "57P03" // cannot_connect_now: starting up or shutting down
	classConnectionException   = "08"    // connection_exception and its subclasses

	// Refusals the callers act on.
	CodeUniqueViolation            = "23505" // unique_violation
	CodeCheckViolation             = "23514" // check_violation: also a row no partition of a partitioned table accepts
	CodeDeadlockDetected           = "40P01" // deadlock_detected
	CodeLockNotAvailable           = "55P03" // lock_not_available: lock_timeout ran out
	CodeInvalidSQLStatementName    = "26000" // invalid_sql_statement_name: no such prepared statement
	CodeDuplicatePreparedStatement = "42P05" // duplicate_prepared_statement
	CodeInvalidCatalogName         = "3D000" // invalid_catalog_name: no such database
)

// Code returns the SQLSTATE of the server's error in err's chain, or ""
// when err holds none (nil, or an error of the client or the network).
func Code(err error) string { return server(err).Code }

// Constraint returns the name of the constraint the server's error in
// err's chain names (a unique or check violation's), or "".
func Constraint(err error) string { return server(err).ConstraintName }

// Message returns the primary message of the server's error in err's
// chain, or "".
func Message(err error) string { return server(err).Message }

// server returns the server's error in err's chain, or a zero one.
func server(err error) *pgconn.PgError {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr
	}
	return &pgconn.PgError{}
}

// Unavailable reports whether err says the database could not be used for
// a while, rather than that something is wrong: a caller retries either
// way, but only the latter is worth an error in the log. It is, from the
// server, a connection exception (class 08), the server shutting down or
// starting (57P01, 57P02, 57P03), out of connections (53300), or a
// standby refusing a write (25006: the primary this connection was made
// to was demoted in a failover); from the client, a connection that could
// not be made (a dial refused or timed out, connect_timeout or a deadline
// of the dial's own), was lost or closed under the statement, a timeout
// in the driver, the pool closed, or an advisory lock's session lost
// (pglock.ErrLost); and an error that is eventstore.ErrUnavailable already.
// Any other error the server reported is a refusal (a unique violation, a
// missing table, bad credentials, no such database), and so is every
// other error of the client (no rows, a value that does not scan or
// encode) and a context cancelled (context.Canceled by itself).
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, eventstore.ErrUnavailable) || errors.Is(err, pglock.ErrLost) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case CodeAdminShutdown, CodeCrashShutdown, CodeCannotConnectNow, CodeTooManyConnections, CodeReadOnlySQLTransaction:
			return true
		}
		return len(pgErr.Code) == 5 && pgErr.Code[:2] == classConnectionException
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error // also context.DeadlineExceeded: a deadline not the caller's (a dial's, a ping's)
	return errors.As(err, &connectErr) || errors.As(err, &netErr) || pgconn.SafeToRetry(err) || pgconn.Timeout(err) ||
		errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, puddle.ErrClosedPool)
}

// ConnectionLost reports whether err says that an established connection
// was closed under the statement: the server's word that it terminated
// the session (admin or crash shutdown), or the socket closed or reset.
// It is narrower than Unavailable, and answers another question: not
// whether the database could not be used for a while, but whether the
// connection the pool handed out was dead, so that every other idle
// connection of the pool is as dead (a restart, a failover, sessions
// terminated) and a read run once more on a fresh one may answer.
// Errors of connecting (a dial refused, the server full or starting), of
// timeouts and of the statement itself (no rows, scanning, encoding, the
// server refusing it) are not: running the statement again would meet
// them again.
func ConnectionLost(err error) bool {
	var connectErr *pgconn.ConnectError
	if err == nil || errors.As(err, &connectErr) {
		return false
	}
	if code := Code(err); code != "" {
		return code == CodeAdminShutdown || code == CodeCrashShutdown
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// Demoted reports whether err is the server refusing a write because it
// is a standby (read_only_sql_transaction): the primary the connection
// was made to has been demoted in a failover, and another server takes
// the writes now, while the connection itself is still open. Unavailable
// counts it too; a transaction a client declared READ ONLY itself never
// writes, so on a primary this code is not met.
func Demoted(err error) bool { return Code(err) == CodeReadOnlySQLTransaction }

// Wrap translates an error of the driver (pgx, pgconn) at the edge of a
// package that owns SQL, naming the operation: nil for nil; the context's
// error when ctx is done (so that errors.Is(err, context.Canceled) still
// holds); otherwise only the driver's message, matching
// eventstore.ErrUnavailable when the database could not be used
// (Unavailable). No driver type reaches callers, who match the package's
// own sentinels or nothing.
func Wrap(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("%s: %w", op, ctxErr)
	}
	if Unavailable(err) {
		return fmt.Errorf("%s: %v: %w", op, err, eventstore.ErrUnavailable)
	}
	return fmt.Errorf("%s: %v", op, err)
}
