package notify

import (
	"errors"
	"io"
	"net"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/pglock"
)

// lockKey is the advisory lock electing the one active notifier.
const lockKey int64 = 0x726c6e6f74696679 // "rlnotify"

// LockKey is the advisory lock the active notifier holds, for telling who
// it is (pglock.Holders).
const LockKey = lockKey

// unavailable reports whether err says the database could not be used for
// a while (the connection could not be made or was lost, the server is
// shutting down or starting, out of connections), rather than that
// something is wrong: the notifier retries either way, but only the
// latter is worth an error in the log.
func unavailable(err error) bool {
	if errors.Is(err, eventstore.ErrUnavailable) || errors.Is(err, pglock.ErrLost) {
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
