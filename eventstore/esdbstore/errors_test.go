package esdbstore

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/reviewledger/reviewledger/eventstore"
)

func TestSentinel(t *testing.T) {
	tests := []struct {
		code esdb.ErrorCode
		want error
	}{
		{esdb.ErrorCodeWrongExpectedVersion, eventstore.ErrWrongExpectedVersion},
		{esdb.ErrorCodeResourceNotFound, eventstore.ErrStreamNotFound},
		{esdb.ErrorCodeStreamDeleted, ErrStreamDeleted},
		{esdb.ErrorCodeDeadlineExceeded, context.DeadlineExceeded},
		{esdb.ErrorUnavailable, ErrUnavailable},
		{esdb.ErrorCodeNotLeader, ErrUnavailable},
		{esdb.ErrorCodeConnectionClosed, ErrUnavailable},
		{esdb.ErrorAborted, ErrUnavailable},
		{esdb.ErrorCodeUnauthenticated, ErrAccessDenied},
		{esdb.ErrorCodeAccessDenied, ErrAccessDenied},
		{esdb.ErrorCodeUnknown, ErrServer},
		{esdb.ErrorCodeUnsupportedFeature, ErrServer},
		{esdb.ErrorCodeResourceAlreadyExists, ErrServer},
		{esdb.ErrorCodeParsing, ErrServer},
		{esdb.ErrorCodeInternalClient, ErrServer},
		{esdb.ErrorCodeInternalServer, ErrServer},
	}
	for _, tc := range tests {
		if got := sentinel(tc.code); got != tc.want { //nolint:errorlint // the sentinel itself, never a wrapping error
			t.Errorf("sentinel(%d) = %v, want %v", tc.code, got, tc.want)
		}
	}
}

func TestGRPCSentinel(t *testing.T) {
	tests := []struct {
		code codes.Code
		want error
	}{
		{codes.NotFound, eventstore.ErrStreamNotFound},
		{codes.DeadlineExceeded, context.DeadlineExceeded},
		{codes.Canceled, context.Canceled},
		{codes.Unavailable, ErrUnavailable},
		{codes.Aborted, ErrUnavailable},
		{codes.Unauthenticated, ErrAccessDenied},
		{codes.PermissionDenied, ErrAccessDenied},
		{codes.Internal, ErrServer},
		{codes.InvalidArgument, ErrServer},
	}
	for _, tc := range tests {
		if got := grpcSentinel(tc.code); got != tc.want { //nolint:errorlint // the sentinel itself, never a wrapping error
			t.Errorf("grpcSentinel(%s) = %v, want %v", tc.code, got, tc.want)
		}
	}
}

func TestTranslate(t *testing.T) {
	live := context.Background()
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	clientErr, _ := esdb.FromError(errors.New("boom"))

	tests := []struct {
		name string
		ctx  context.Context
		err  error
		want error
	}{
		{"client error", live, clientErr, ErrServer},
		{"wrapped client error", live, fmt.Errorf("could not send: %w", clientErr), ErrServer},
		{"bare grpc status", live, status.Error(codes.Unavailable, "connection refused"), ErrUnavailable},
		{"wrapped grpc status", live, fmt.Errorf("read: %w", status.Error(codes.PermissionDenied, "no")), ErrAccessDenied},
		{"plain error", live, errors.New("odd"), ErrServer},
		{"context error passes", live, fmt.Errorf("x: %w", context.DeadlineExceeded), context.DeadlineExceeded},
		{"done ctx wins", canceled, clientErr, context.Canceled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := translate(tc.ctx, "read review-r1", tc.err)
			if !errors.Is(got, tc.want) {
				t.Fatalf("translate = %v, want it to match %v", got, tc.want)
			}
			var esErr *esdb.Error
			if errors.As(got, &esErr) {
				t.Fatalf("translate = %v: the client's error type leaks", got)
			}
			if _, ok := status.FromError(got); ok {
				t.Fatalf("translate = %v: a gRPC status leaks", got)
			}
		})
	}
	if translate(live, "op", nil) != nil {
		t.Fatal("translate(nil) is not nil")
	}
}

func TestDeletedIsMissing(t *testing.T) {
	err := deletedIsMissing(fmt.Errorf("read s: %w", ErrStreamDeleted))
	if !errors.Is(err, ErrStreamDeleted) || !errors.Is(err, eventstore.ErrStreamNotFound) {
		t.Fatalf("deleted stream: %v, want ErrStreamDeleted and ErrStreamNotFound", err)
	}
	other := fmt.Errorf("read s: %w", ErrUnavailable)
	if got := deletedIsMissing(other); got != other { //nolint:errorlint // the very error passed in, unwrapped
		t.Fatalf("other error changed: %v", got)
	}
}

func TestParseCurrent(t *testing.T) {
	tests := []struct {
		msg     string
		exists  bool
		current uint64
		ok      bool
	}{
		{"[ErrorCodeWrongExpectedVersion] an append request failed the optimistic concurrency on the server: wrong expected version: expecting '3' but got '5'", true, 5, true},
		{"wrong expected version: expecting 'no_stream' but got '0'", true, 0, true},
		{"wrong expected version: expecting '0' but got 'no_stream'", false, 0, true},
		{"wrong expected version: expecting 'stream_exists' but got 'no_stream'", false, 0, true},
		{"wrong expected version: expecting '1' but got '-1'", false, 0, false},
		{"[ErrorCodeWrongExpectedVersion] an append request failed the optimistic concurrency on the server", false, 0, false},
	}
	for _, tc := range tests {
		exists, current, ok := parseCurrent(tc.msg)
		if exists != tc.exists || current != tc.current || ok != tc.ok {
			t.Errorf("parseCurrent(%q) = %v, %d, %v; want %v, %d, %v", tc.msg, exists, current, ok, tc.exists, tc.current, tc.ok)
		}
	}
}
