// Package storeerr tells a database gone away from a database that
// refused something: the one test every component that retries its
// database work uses to choose between a warning and an error in the log.
package storeerr

import (
	"errors"
	"io"
	"net"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/reviewledger/reviewledger/eventstore"
)

// Unavailable reports whether err says the database could not be used for
// a while (the connection could not be made or was lost, the server is
// shutting down or starting, out of connections, every host of a
// multi-host URL a standby during a failover), rather than that something
// is wrong: a caller retries either way, but only the latter is worth an
// error in the log.
func Unavailable(err error) bool {
	if errors.Is(err, eventstore.ErrUnavailable) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "57P01", "57P02", "57P03", "53300", "25006":
			return true
		}
		return len(pgErr.Code) == 5 && pgErr.Code[:2] == "08"
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connectErr) || errors.As(err, &netErr) || pgconn.SafeToRetry(err) || pgconn.Timeout(err) ||
		errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed)
}
