package storeerr_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/puddle/v2"

	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/pglock"
	"github.com/reviewledger/reviewledger/eventstore/storeerr"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// The errors of a database gone away count as unavailable (a warning);
// others do not. The server's errors by SQLSTATE, the client's of the
// network and the driver, and the errors that say so already.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want bool
	}{
		// The server: going away, starting, full, a standby.
		{&pgconn.PgError{Code: "57P01"}, true}, // admin_shutdown
		{&pgconn.PgError{Code: "57P02"}, true}, // crash_shutdown
		{&pgconn.PgError{Code: "57P03"}, true}, // cannot_connect_now
		{&pgconn.PgError{Code: "53300"}, true}, // too_many_connections
		{&pgconn.PgError{Code: "25006"}, true}, // read_only_sql_transaction: demoted
		{&pgconn.PgError{Code: "08000"}, true}, // connection_exception
		{&pgconn.PgError{Code: "08001"}, true},
		{&pgconn.PgError{Code: "08006"}, true},
		{&pgconn.PgError{Code: "08P01"}, true},
		{fmt.Errorf("tx: %w", &pgconn.PgError{Code: "57P01"}), true},
		// The server: refusals.
		{&pgconn.PgError{Code: "23505"}, false}, // unique_violation
		{&pgconn.PgError{Code: "40P01"}, false}, // deadlock_detected
		{&pgconn.PgError{Code: "42P01"}, false}, // undefined_table
		{&pgconn.PgError{Code: "55P03"}, false}, // lock_not_available
		{&pgconn.PgError{Code: "28P01"}, false}, // invalid_password
		{&pgconn.PgError{Code: "3D000"}, false}, // invalid_catalog_name
		{&pgconn.PgError{Code: "08"}, false},    // not a SQLSTATE
		// The network and the driver.
		{&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, true},
		{fmt.Errorf("read: %w", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}), true},
		{fmt.Errorf("query: %w", pgconn.ErrConnClosed), true},
		{fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true},
		{fmt.Errorf("write: %w", net.ErrClosed), true},
		{fmt.Errorf("acquire: %w", puddle.ErrClosedPool), true},
		{fmt.Errorf("ping: %w", context.DeadlineExceeded), true}, // a deadline not the caller's
		// Already said.
		{fmt.Errorf("read: %w", eventstore.ErrUnavailable), true},
		{fmt.Errorf("lead: %w", pglock.ErrLost), true},
		// Neither.
		{nil, false},
		{context.Canceled, false},
		{fmt.Errorf("query: %w", context.Canceled), false},
		{pgx.ErrNoRows, false},
		{pgx.ErrTxClosed, false},
		{errors.New("signing: key rejected"), false},
	} {
		if got := storeerr.Unavailable(c.err); got != c.want {
			t.Errorf("Unavailable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// Errors the driver returns for real: a connection closed under a
// statement, a dial refused, a dial that timed out (connect_timeout, the
// caller's context alive), a closed pool. All unavailable.
func TestUnavailableDriverErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// A port nothing listens on: the dial is refused.
	refused, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusedAddr := refused.Addr().String()
	_ = refused.Close()
	// A listener that accepts and never answers: the dial's own deadline.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = silent.Close() })
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = c.Close() })
		}
	}()
	connect := func(addr string) error {
		conn, err := pgconn.Connect(ctx, "postgres://u@"+addr+"/db?sslmode=disable&connect_timeout=1")
		if err == nil {
			_ = conn.Close(ctx)
		}
		return err
	}
	closedPool, err := pgxpool.New(ctx, "postgres://u@"+refusedAddr+"/db?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	closedPool.Close()
	_, closedPoolErr := closedPool.Exec(ctx, "SELECT 1")

	pool, err := pgxpool.New(ctx, dbtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	raw := conn.Hijack()
	_ = raw.Close(ctx)
	pool.Close()
	_, closedErr := raw.Exec(ctx, "SELECT 1")

	for what, err := range map[string]error{
		"a statement on a closed connection": fmt.Errorf("batch: %w", closedErr),
		"a dial refused":                     connect(refusedAddr),
		"a dial timed out":                   connect(silent.Addr().String()),
		"a closed pool":                      closedPoolErr,
	} {
		if err == nil || !storeerr.Unavailable(err) {
			t.Errorf("%s: %v (%T): want an error that is unavailable", what, err, err)
		}
		if strings.HasPrefix(what, "a dial") && storeerr.ConnectionLost(err) {
			t.Errorf("%s: %v (%T): a connection lost, want one never made", what, err, err)
		}
	}
}

// Code is the SQLSTATE of the server's error in the chain, or "".
func TestCode(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want string
	}{
		{&pgconn.PgError{Code: storeerr.CodeUniqueViolation}, "23505"},
		{fmt.Errorf("swap: %w", &pgconn.PgError{Code: storeerr.CodeLockNotAvailable}), "55P03"},
		{errors.New("no server here"), ""},
		{nil, ""},
	} {
		if got := storeerr.Code(c.err); got != c.want {
			t.Errorf("Code(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

// Constraint and Message are those of the server's error in the chain,
// or "".
func TestConstraintAndMessage(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("append: %w", &pgconn.PgError{Code: storeerr.CodeUniqueViolation, ConstraintName: "event_id_key", Message: "duplicate key value"})
	if got := storeerr.Constraint(err); got != "event_id_key" {
		t.Errorf("Constraint = %q", got)
	}
	if got := storeerr.Message(err); got != "duplicate key value" {
		t.Errorf("Message = %q", got)
	}
	for _, err := range []error{nil, errors.New("no server here")} {
		if c, m := storeerr.Constraint(err), storeerr.Message(err); c != "" || m != "" {
			t.Errorf("Constraint, Message(%v) = %q, %q; want none", err, c, m)
		}
	}
}

// ConnectionLost holds for a connection closed under the statement, by
// the server or on the socket, and for nothing else Unavailable counts: a
// server full or starting, a timeout, a standby's refusal (and a dial:
// TestUnavailableDriverErrors). Demoted holds for the standby's refusal
// alone.
func TestConnectionLostAndDemoted(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err           error
		lost, demoted bool
	}{
		{&pgconn.PgError{Code: "57P01"}, true, false},                       // admin_shutdown
		{fmt.Errorf("tx: %w", &pgconn.PgError{Code: "57P02"}), true, false}, // crash_shutdown
		{fmt.Errorf("read: %w", io.EOF), true, false},
		{fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true, false},
		{fmt.Errorf("read: %w", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}), true, false},
		{fmt.Errorf("write: %w", &net.OpError{Op: "write", Net: "tcp", Err: syscall.EPIPE}), true, false},
		{&pgconn.PgError{Code: "25006"}, false, true},  // read_only_sql_transaction
		{&pgconn.PgError{Code: "57P03"}, false, false}, // cannot_connect_now
		{&pgconn.PgError{Code: "53300"}, false, false}, // too_many_connections
		{&pgconn.PgError{Code: "08006"}, false, false}, // connection_failure
		{&pgconn.PgError{Code: "23505"}, false, false},
		{fmt.Errorf("ping: %w", context.DeadlineExceeded), false, false},
		{pgx.ErrNoRows, false, false},
		{nil, false, false},
	} {
		if got := storeerr.ConnectionLost(c.err); got != c.lost {
			t.Errorf("ConnectionLost(%v) = %v, want %v", c.err, got, c.lost)
		}
		if got := storeerr.Demoted(c.err); got != c.demoted {
			t.Errorf("Demoted(%v) = %v, want %v", c.err, got, c.demoted)
		}
	}
}

// Wrap names the operation and keeps the driver's message but no driver
// type; a database gone away is eventstore.ErrUnavailable (so that a
// retrying caller tells an outage from a defect), a statement the server
// refused is not, and a caller's context that ended is that context's
// error whatever the driver said.
func TestWrap(t *testing.T) {
	t.Parallel()
	live := context.Background()
	cancelled, cancel := context.WithCancel(live)
	cancel()
	expired, cancelExpired := context.WithDeadline(live, time.Now().Add(-time.Second))
	defer cancelExpired()
	for _, c := range []struct {
		ctx         context.Context
		op          string
		err         error
		unavailable bool
		ctxErr      error // the context's error it must match
		cause       string
	}{
		{live, "load review_summary", &pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"}, true, nil, "terminating connection"},
		{live, "audit signing lock", &pgconn.PgError{Code: "57P01", Message: "terminating connection"}, true, nil, "terminating connection"},
		{live, "begin", fmt.Errorf("lock: %w", pgconn.ErrConnClosed), true, nil, "conn closed"},
		{live, "append to review-1", &pgconn.PgError{Code: "25006", Message: "cannot execute INSERT in a read-only transaction"}, true, nil, "read-only"},
		{live, "lead", fmt.Errorf("%w: ping: %w", pglock.ErrLost, io.ErrUnexpectedEOF), true, nil, "advisory lock"},
		{live, "x", &pgconn.PgError{Code: "42P01", Message: `relation "manual_queue" does not exist`}, false, nil, "manual_queue"},
		{live, "store checkpoint", &pgconn.PgError{Code: "23505", Message: "duplicate key"}, false, nil, "duplicate key"},
		{live, "scan", errors.New("cannot scan NULL into *string"), false, nil, "cannot scan"},
		{cancelled, "read marks", &pgconn.PgError{Code: "57P01", Message: "terminating connection"}, false, context.Canceled, ""},
		{cancelled, "read marks", errors.New("timeout: context canceled"), false, context.Canceled, ""},
		{expired, "claim work", fmt.Errorf("dial: %w", context.DeadlineExceeded), false, context.DeadlineExceeded, ""},
	} {
		err := storeerr.Wrap(c.ctx, c.op, c.err)
		var pgErr *pgconn.PgError
		switch {
		case err == nil:
			t.Errorf("Wrap(%q, %v) = nil", c.op, c.err)
			continue
		case errors.As(err, &pgErr):
			t.Errorf("Wrap(%q, %v) = %v: a pgx error type reached the caller", c.op, c.err, err)
		case errors.Is(err, eventstore.ErrUnavailable) != c.unavailable || c.ctxErr == nil && storeerr.Unavailable(err) != c.unavailable:
			t.Errorf("Wrap(%q, %v) = %v: ErrUnavailable %v, want %v", c.op, c.err, err, errors.Is(err, eventstore.ErrUnavailable), c.unavailable)
		case c.ctxErr != nil && !errors.Is(err, c.ctxErr):
			t.Errorf("Wrap(%q, %v) with the context done = %v, want %v", c.op, c.err, err, c.ctxErr)
		case !strings.HasPrefix(err.Error(), c.op+": ") || !strings.Contains(err.Error(), c.cause):
			t.Errorf("Wrap(%q, %v) = %q: want the operation first and the cause %q", c.op, c.err, err, c.cause)
		}
	}
	if err := storeerr.Wrap(cancelled, "forget webhook id", nil); err != nil {
		t.Errorf("Wrap(nil) = %v, want nil", err)
	}
}
