package pgstore

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/clock"
	"github.com/reviewledger/reviewledger/eventstore/storeerr"
)

// broadcast wakes every goroutine waiting on it at once.
type broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

func (b *broadcast) init() { b.ch = make(chan struct{}) }

// wait returns a channel closed by the next fire.
func (b *broadcast) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ch
}

func (b *broadcast) fire() {
	b.mu.Lock()
	defer b.mu.Unlock()
	close(b.ch)
	b.ch = make(chan struct{})
}

// signal announces a committed append: at once to waiters in this process,
// and through the notifier to other processes.
func (s *Store) signal() {
	s.wake.fire()
	select {
	case s.notify <- struct{}{}:
	default: // a notification is pending already
	}
}

// notifier sends one NOTIFY for every burst of appends, at most one per
// NotifyInterval. Sending it outside the appending transaction keeps the
// server's notification queue lock, taken at commit, off the append path.
func (s *Store) notifier(ctx context.Context) {
	defer s.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.notify:
		}
		if _, err := s.pool.Exec(ctx, `SELECT pg_notify($1, '')`, Channel); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("event store: notify", "error", err)
		}
		if clock.Sleep(ctx, s.cfg.NotifyInterval) != nil {
			return
		}
	}
}

// listen keeps one connection listening on Channel and wakes the waiters on
// every notification, reconnecting after failures.
func (s *Store) listen(ctx context.Context) {
	defer s.wg.Done()
	for {
		err := s.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		s.cfg.Logger.Warn("event store: listener lost, reconnecting", "error", err)
		s.wake.fire() // a notification may have been missed
		if clock.Sleep(ctx, s.cfg.PollInterval) != nil {
			return
		}
	}
}

func (s *Store) listenOnce(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, s.sessions().Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, `LISTEN `+Channel); err != nil {
		return err
	}
	s.wake.fire() // appends before LISTEN went unannounced
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		s.wake.fire()
	}
}

// sessions is the pool whose settings the LISTEN connection uses.
func (s *Store) sessions() *pgxpool.Pool {
	if s.cfg.Sessions != nil {
		return s.cfg.Sessions
	}
	return s.pool
}

// WaitForEvents implements eventstore.Store. It returns at once when events
// after pos are readable; otherwise at the next append announced in this
// process or by notification, after HeldBackInterval when events are
// committed but held back by an older running transaction, and after
// PollInterval at the latest.
func (s *Store) WaitForEvents(ctx context.Context, pos eventstore.Position) error {
	s.startListening()
	woken := s.wake.wait()
	// The first event after pos tells both: whether there is one
	// (pending), and whether it is readable yet (ready): being first, its
	// transaction ID is the smallest, so if it is held back every later
	// one is. One probe of the index on xid, whatever plan the server
	// caches for the statement.
	var ready, pending bool
	err := s.pool.QueryRow(ctx, `SELECT `+readable+` FROM event WHERE `+after+` ORDER BY xid, seq LIMIT 1`,
		uintText(pos.Commit), clamp(pos.Prepare)).Scan(&ready)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		err = nil
	case err == nil:
		pending = true
	}
	if err != nil {
		return storeerr.Wrap(ctx, "wait for events after "+pos.String(), err)
	}
	if ready {
		return nil
	}
	d := s.cfg.PollInterval
	if pending {
		d = s.cfg.HeldBackInterval
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-woken:
	case <-t.C:
	}
	return nil
}
