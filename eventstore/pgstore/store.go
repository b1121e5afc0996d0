// Package pgstore is the PostgreSQL eventstore.Store, on pgx.
//
// All events live in one table partitioned by range of seq (migrations
// 0001_event and 0004_event_partitions), beside a head table, event_stream,
// holding each stream's last revision. An append is one statement that
// moves the stream's head on when its expected-revision condition holds
// (an INSERT … ON CONFLICT DO UPDATE … WHERE on the head row) and inserts
// the events at the revisions it gives: two appends at the same revision
// serialize on the head row and the second writes nothing, so streams need
// no lock of their own and unrelated streams never wait for each other. An
// append to several streams (AppendMulti, AppendMultiWith) is one such
// statement for all of them, in one transaction. Old partitions are
// archived by detaching them (Partitions, Detach).
//
// The global order is (writing transaction ID, sequence), read only below the
// oldest transaction still running; docs/architecture.md ("Event store and
// global order") explains why that is gap-safe and what holds it back. Stall
// measures the hold-up.
package pgstore

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/eventstore"
)

var _ eventstore.Store = (*Store)(nil)

// Channel is the PostgreSQL notification channel announcing appends.
const Channel = "reviewledger_event"

// Config tunes a Store. The zero value is usable.
type Config struct {
	// PollInterval bounds how long WaitForEvents waits when no notification
	// arrives, so that a lost one only delays a reader. Default 1s.
	PollInterval time.Duration
	// HeldBackInterval is how long WaitForEvents waits when events are
	// committed but not yet readable because an older transaction is still
	// running. Default 25ms.
	HeldBackInterval time.Duration
	// NotifyInterval is the shortest time between two notifications this
	// store sends; appends in between share one. Default 10ms.
	NotifyInterval time.Duration
	// Logger receives listener connection errors. Default slog.Default().
	Logger *slog.Logger
	// Sessions is the pool whose connection settings the LISTEN
	// connection uses: a server session of its own, which a transaction
	// pooler in front of the store's pool would not give. Default the
	// store's pool.
	Sessions *pgxpool.Pool
}

func (c *Config) setDefaults() {
	if c.PollInterval <= 0 {
		c.PollInterval = time.Second
	}
	if c.HeldBackInterval <= 0 {
		c.HeldBackInterval = 25 * time.Millisecond
	}
	if c.NotifyInterval <= 0 {
		c.NotifyInterval = 10 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Store is an event store in PostgreSQL. Create it with New and release it
// with Close.
type Store struct {
	pool *pgxpool.Pool
	cfg  Config
	wake broadcast

	notify chan struct{}   // appends signal the notifier; buffered 1
	ctx    context.Context // the listener's and the notifier's
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// listening is set once the listener runs: it starts with the first
	// WaitForEvents, so a command that never waits (audit verify, replay)
	// opens no connection for it. closed is set by Close, after which none
	// starts.
	mu        sync.Mutex
	listening bool
	closed    bool

	// afterCombined runs, when tests set it, between the combined insert of
	// an AppendMultiWith and the resolution of the streams it did not write.
	afterCombined func()
}

// New returns a store on pool, whose database must be migrated
// (migrations.Apply). It starts a notifier, and with the first
// WaitForEvents a listener on a connection of its own; Close stops them.
// Closing pool is the caller's business.
func New(pool *pgxpool.Pool, cfg Config) *Store {
	cfg.setDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	s := &Store{
		pool:   pool,
		cfg:    cfg,
		notify: make(chan struct{}, 1),
		ctx:    ctx,
		cancel: cancel,
	}
	s.wake.init()
	s.wg.Add(1)
	go s.notifier(ctx)
	return s
}

// startListening starts the listener unless it runs or the store is
// closed.
func (s *Store) startListening() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listening || s.closed {
		return
	}
	s.listening = true
	s.wg.Add(1)
	go s.listen(s.ctx)
}

// Close stops the listener and the notifier and waits for them. It must be
// called before the pool is closed.
func (s *Store) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
}
