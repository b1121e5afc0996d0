package esdbstore

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/reviewledger/reviewledger/eventstore"
)

// Errors of this backend. The client's own error types never leave the
// package: every failure is one of these or one of eventstore's, wrapped with
// the operation and the server's message.
var (
	// ErrInvalidURL is returned by Open for a connection string that cannot
	// be used.
	ErrInvalidURL = errors.New("invalid EventStoreDB connection string")
	// ErrUnavailable means the server could not be reached or is not the
	// leader right now. Retrying later may succeed. It is the port's
	// eventstore.ErrUnavailable, which every backend's such errors match.
	ErrUnavailable = eventstore.ErrUnavailable
	// ErrAccessDenied means the server refused the credentials or the
	// stream's access control list.
	ErrAccessDenied = errors.New("event store access denied")
	// ErrStreamDeleted means the stream was deleted (tombstoned) on the
	// server. Reads report it together with eventstore.ErrStreamNotFound.
	ErrStreamDeleted = errors.New("stream deleted")
	// ErrServer is any other failure reported by the server or the client
	// library.
	ErrServer = errors.New("event store error")
)

// sentinel maps the client's error code to the error callers test for.
func sentinel(code esdb.ErrorCode) error {
	switch code {
	case esdb.ErrorCodeWrongExpectedVersion:
		return eventstore.ErrWrongExpectedVersion
	case esdb.ErrorCodeResourceNotFound:
		return eventstore.ErrStreamNotFound
	case esdb.ErrorCodeStreamDeleted:
		return ErrStreamDeleted
	case esdb.ErrorCodeDeadlineExceeded:
		return context.DeadlineExceeded
	case esdb.ErrorUnavailable, esdb.ErrorCodeNotLeader, esdb.ErrorCodeConnectionClosed, esdb.ErrorAborted:
		return ErrUnavailable
	case esdb.ErrorCodeUnauthenticated, esdb.ErrorCodeAccessDenied:
		return ErrAccessDenied
	default:
		return ErrServer
	}
}

// grpcSentinel maps a bare gRPC status, which a few client paths return
// unwrapped, the same way.
func grpcSentinel(code codes.Code) error {
	switch code {
	case codes.NotFound:
		return eventstore.ErrStreamNotFound
	case codes.DeadlineExceeded:
		return context.DeadlineExceeded
	case codes.Canceled:
		return context.Canceled
	case codes.Unavailable, codes.Aborted:
		return ErrUnavailable
	case codes.Unauthenticated, codes.PermissionDenied:
		return ErrAccessDenied
	default:
		return ErrServer
	}
}

// translate turns an error from the client into one of ours, prefixed with
// op (e.g. "read review-r1"). When ctx is done, that is the cause reported,
// whatever the client made of it.
func translate(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("%s: %w", op, ctxErr)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w", op, err)
	}
	var esErr *esdb.Error
	if errors.As(err, &esErr) {
		return fmt.Errorf("%s: %s: %w", op, esErr.Error(), sentinel(esErr.Code()))
	}
	if st, ok := status.FromError(err); ok {
		return fmt.Errorf("%s: %s: %w", op, st.Message(), grpcSentinel(st.Code()))
	}
	return fmt.Errorf("%s: %s: %w", op, err.Error(), ErrServer)
}

// code returns the client's error code in err's chain, if there is one.
func code(err error) (esdb.ErrorCode, bool) {
	var esErr *esdb.Error
	if errors.As(err, &esErr) {
		return esErr.Code(), true
	}
	return 0, false
}

// wrongExpectedRE matches the client's description of a failed
// expected-revision check: "expecting '<expected>' but got '<current>'",
// where current is "no_stream" or a revision.
var wrongExpectedRE = regexp.MustCompile(`expecting '([^']*)' but got '([^']*)'`)

// parseCurrent reads the stream's current state out of the client's
// wrong-expected-version message. ok is false when the message does not say.
func parseCurrent(msg string) (exists bool, current uint64, ok bool) {
	m := wrongExpectedRE.FindStringSubmatch(msg)
	if m == nil {
		return false, 0, false
	}
	if m[2] == "no_stream" {
		return false, 0, true
	}
	n, err := strconv.ParseUint(m[2], 10, 64)
	if err != nil {
		return false, 0, false
	}
	return true, n, true
}
