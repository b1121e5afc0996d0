package esdbstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"

	"github.com/reviewledger/reviewledger/eventstore"
)

// These tests use the real client without a server: a port nobody listens
// on, one discovery attempt, so that failures come quickly.

// deadURL returns a connection string for a local port that refuses
// connections.
func deadURL(t *testing.T, scheme string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%s://%s?tls=false&maxDiscoverAttempts=1&discoveryInterval=1&gossipTimeout=1", scheme, addr)
}

func TestOpenInvalid(t *testing.T) {
	tests := []string{"", "http://localhost:2113", "esdb://localhost:2113?tsl=false", "esdb://localhost:2113/path"}
	for _, url := range tests {
		s, err := Open(context.Background(), url)
		if !errors.Is(err, ErrInvalidURL) {
			t.Errorf("Open(%q) = %v, want ErrInvalidURL", url, err)
		}
		if s != nil {
			t.Errorf("Open(%q) returned a store with its error", url)
		}
	}
}

func TestOpenKeepsPasswordOutOfErrors(t *testing.T) {
	_, err := Open(context.Background(), "esdb://admin:hunter2-secret@localhost:2113/path?tls=false")
	if err == nil || strings.Contains(err.Error(), "hunter2-secret") {
		t.Fatalf("Open error %v: want an error without the password", err)
	}
}

func TestOpenUnreachable(t *testing.T) {
	for _, scheme := range []string{"esdb", "kurrentdb"} {
		t.Run(scheme, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			s, err := Open(ctx, deadURL(t, scheme))
			if !errors.Is(err, ErrUnavailable) {
				t.Fatalf("Open on a closed port: %v, want ErrUnavailable", err)
			}
			if s != nil {
				t.Fatal("Open returned a store with its error")
			}
			var esErr *esdb.Error
			if errors.As(err, &esErr) {
				t.Fatalf("Open error %v carries the client's error type", err)
			}
		})
	}
}

// unreachable returns a store whose client points at a closed port, without
// Open's check.
func unreachable(t *testing.T) *Store {
	t.Helper()
	cfg := Config{URL: deadURL(t, "esdb")}
	cfg.setDefaults()
	conf, err := esdb.ParseConnectionString(cfg.URL)
	if err != nil {
		t.Fatal(err)
	}
	conf.Logger = clientLogger(cfg.Logger)
	client, err := esdb.NewClient(conf)
	if err != nil {
		t.Fatal(err)
	}
	s := &Store{cfg: cfg, conf: conf, client: client}
	t.Cleanup(s.Close)
	return s
}

func TestUnreachableOperations(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := eventstore.EventData{ID: id1, Type: "Submitted", Data: []byte(`{}`)}
	ops := map[string]func(s *Store) error{
		"Append NoStream": func(s *Store) error {
			_, err := s.Append(ctx, "review-r1", eventstore.NoStream, e)
			return err
		},
		"Append Exact": func(s *Store) error {
			_, err := s.Append(ctx, "review-r1", eventstore.Exact(3), e)
			return err
		},
		"AppendMulti": func(s *Store) error {
			results, err := s.AppendMulti(ctx,
				eventstore.StreamAppend{Stream: "review-r1", Expected: eventstore.NoStream, Events: []eventstore.EventData{e}},
				eventstore.StreamAppend{Stream: "review-r2", Expected: eventstore.Exact(3), Events: []eventstore.EventData{{ID: id2, Type: "Submitted"}}},
			)
			if results != nil {
				return fmt.Errorf("%d results with the call's error %v", len(results), err)
			}
			return err
		},
		"ReadStream": func(s *Store) error {
			_, err := s.ReadStream(ctx, "review-r1", 0)
			return err
		},
		"ReadAll": func(s *Store) error {
			_, err := s.ReadAll(ctx, eventstore.Start, 10)
			return err
		},
		"WaitForEvents": func(s *Store) error {
			return s.WaitForEvents(ctx, eventstore.Position{Commit: 10, Prepare: 10})
		},
	}
	for name, op := range ops {
		t.Run(name, func(t *testing.T) {
			s := unreachable(t)
			// The first call fails discovery; the client then refuses every
			// call as closed, and the store replaces it, so that each call
			// tries the server again.
			for i := range 3 {
				first := s.client
				err := op(s)
				if !errors.Is(err, ErrUnavailable) || !errors.Is(err, eventstore.ErrUnavailable) {
					t.Fatalf("call %d: %v, want ErrUnavailable", i, err)
				}
				var esErr *esdb.Error
				if errors.As(err, &esErr) {
					t.Fatalf("call %d: %v carries the client's error type", i, err)
				}
				if i == 1 && s.client == first {
					t.Fatal("client not replaced after it closed itself")
				}
			}
		})
	}
}

func TestClosed(t *testing.T) {
	s := unreachable(t)
	s.Close()
	s.Close() // twice is harmless
	ctx := context.Background()
	e := eventstore.EventData{ID: id1, Type: "Submitted"}
	if _, err := s.Append(ctx, "review-r1", eventstore.NoStream, e); !errors.Is(err, ErrClosed) {
		t.Errorf("Append after Close: %v", err)
	}
	if _, err := s.AppendMulti(ctx, eventstore.StreamAppend{Stream: "review-r1", Expected: eventstore.NoStream, Events: []eventstore.EventData{e}}); !errors.Is(err, ErrClosed) {
		t.Errorf("AppendMulti after Close: %v", err)
	}
	if _, err := s.ReadStream(ctx, "review-r1", 0); !errors.Is(err, ErrClosed) {
		t.Errorf("ReadStream after Close: %v", err)
	}
	if _, err := s.ReadAll(ctx, eventstore.Start, 1); !errors.Is(err, ErrClosed) {
		t.Errorf("ReadAll after Close: %v", err)
	}
	if err := s.WaitForEvents(ctx, eventstore.Start); !errors.Is(err, ErrClosed) {
		t.Errorf("WaitForEvents after Close: %v", err)
	}
}

func TestArgumentsCheckedBeforeTheServer(t *testing.T) {
	s := unreachable(t)
	ctx := context.Background()
	if _, err := s.Append(ctx, "review-r1", eventstore.NoStream, eventstore.EventData{ID: "e1", Type: "Submitted"}); !errors.Is(err, eventstore.ErrInvalidEvent) {
		t.Errorf("Append with a bad ID: %v, want ErrInvalidEvent", err)
	}
	if _, err := s.AppendMulti(ctx,
		eventstore.StreamAppend{Stream: "review-r1", Expected: eventstore.NoStream, Events: []eventstore.EventData{{ID: id1, Type: "Submitted"}}},
		eventstore.StreamAppend{Stream: "$review-r2", Expected: eventstore.NoStream, Events: []eventstore.EventData{{ID: id2, Type: "Submitted"}}},
	); !errors.Is(err, eventstore.ErrInvalidEvent) {
		t.Errorf("AppendMulti to a $ stream: %v, want ErrInvalidEvent", err)
	}
	if got, err := s.ReadAll(ctx, eventstore.Start, 0); got != nil || err != nil {
		t.Errorf("ReadAll limit 0: %v, %v; want nothing", got, err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.WaitForEvents(canceled, eventstore.Start); err != context.Canceled { //nolint:errorlint // ctx.Err() itself, as the port says
		t.Errorf("WaitForEvents with a canceled ctx: %v, want context.Canceled", err)
	}
}
