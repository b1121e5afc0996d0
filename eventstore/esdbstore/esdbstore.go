// Package esdbstore is the EventStoreDB/KurrentDB eventstore.Store, on the
// gRPC client github.com/EventStore/EventStore-Client-Go/v4.
//
// Streams map one to one onto server streams and revisions onto event
// numbers; the global order is the server's $all stream, whose (commit,
// prepare) transaction-log positions are the port's Position. The server
// checks expected revisions itself and is idempotent by event ID; this
// backend adds what the port asks beyond that: every successful append is
// read back, so that an ID reused for other content is an error instead of
// a silent no-op (docs/esdbstore.md explains the cost and what is still not
// detected).
//
// Errors of the client never leave the package: they become eventstore's
// errors (ErrWrongExpectedVersion, ErrStreamNotFound, ...) or this package's
// (ErrUnavailable, ErrAccessDenied, ErrStreamDeleted, ErrServer).
package esdbstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"

	"github.com/reviewledger/reviewledger/eventstore"
)

var _ eventstore.Store = (*Store)(nil)

// ErrClosed is returned by every method after Close.
var ErrClosed = errors.New("event store closed")

// Store is an event store on an EventStoreDB or KurrentDB server. It is safe
// for concurrent use. Create it with Open and release it with Close.
type Store struct {
	cfg  Config
	conf *esdb.Configuration // parsed once; a replacement client reuses it

	mu      sync.Mutex
	client  *esdb.Client
	closed  bool
	reached *esdb.Client // the client known to have found the server
}

// Open connects to the server at url (see Config.URL) with default settings
// and checks that it answers and lets this user read $all, which ReadAll and
// the projections need.
func Open(ctx context.Context, url string) (*Store, error) {
	return OpenConfig(ctx, Config{URL: url})
}

// OpenConfig is Open with settings.
func OpenConfig(ctx context.Context, cfg Config) (*Store, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	norm, err := normalizeURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	conf, err := esdb.ParseConnectionString(norm)
	if err != nil {
		return nil, fmt.Errorf("esdbstore: URL: %s: %w", scrub(err.Error(), cfg.URL), ErrInvalidURL)
	}
	conf.Logger = clientLogger(cfg.Logger)
	client, err := esdb.NewClient(conf)
	if err != nil {
		return nil, fmt.Errorf("esdbstore: URL: %s: %w", scrub(err.Error(), cfg.URL), ErrInvalidURL)
	}
	s := &Store{cfg: cfg, conf: conf, client: client}
	if err := s.ping(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("esdbstore: open: %w", err)
	}
	return s, nil
}

// Close releases the connection. Call it once the store's users have
// stopped; methods called afterwards return ErrClosed.
func (s *Store) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	_ = s.client.Close() // always nil
}

// conn returns the client to use.
func (s *Store) conn() (*esdb.Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	return s.client, nil
}

// found records that c has found the server: a call made through it was
// answered.
func (s *Store) found(c *esdb.Client) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reached = c
}

// hasFound reports whether c has found the server. Until it has, the
// client's first call discovers the server, and calls made at the same time
// are never answered if that discovery fails (docs/esdbstore.md, "Client
// quirks"), so concurrent callers make one call alone first.
func (s *Store) hasFound(c *esdb.Client) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reached == c
}

// renew replaces c after it gave up its connection. The client (v4) stops
// for good when it fails to rediscover the server after a disconnection, and
// answers every later call with a closed-connection error; a new client
// starts discovery afresh, so the store recovers once the server is back.
// The old client is dropped, not closed: its connection goroutine has
// already ended, and closing it could race a caller still inside it.
func (s *Store) renew(c *esdb.Client, err error) {
	if cd, ok := code(err); !ok || cd != esdb.ErrorCodeConnectionClosed {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.client != c {
		return
	}
	next, nerr := esdb.NewClient(s.conf)
	if nerr != nil { // only a configuration error, which Open already ruled out
		return
	}
	s.client = next
}

// ping reads the last record of $all.
func (s *Store) ping(ctx context.Context) error {
	c, err := s.conn()
	if err != nil {
		return err
	}
	if _, err = s.readAllRaw(ctx, c, esdb.ReadAllOptions{Direction: esdb.Backwards, From: esdb.End{}}, 1); err != nil {
		return err
	}
	s.found(c)
	return nil
}

// clientLogger passes the client's log lines to l at debug level: the client
// logs every dropped subscription and transient error as an error, while the
// store returns those to its callers, who decide what is worth reporting.
func clientLogger(l *slog.Logger) esdb.LoggingFunc {
	return func(level esdb.LogLevel, format string, args ...any) {
		if !l.Enabled(context.Background(), slog.LevelDebug) {
			return
		}
		l.Debug(fmt.Sprintf(format, args...), "component", "esdb", "client_level", level)
	}
}
