package esdbstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"

	"github.com/reviewledger/reviewledger/eventstore"
)

// ReadStream implements eventstore.Store. A stream deleted on the server is
// ErrStreamNotFound as well as ErrStreamDeleted.
func (s *Store) ReadStream(ctx context.Context, stream string, from uint64) ([]eventstore.RecordedEvent, error) {
	c, err := s.conn()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", stream, err)
	}
	// The count is the largest the server takes as "all of it", as other
	// clients send.
	return s.readStream(ctx, c, stream, from, math.MaxInt64, false)
}

// readStream reads count events of stream from revision from on; leader
// demands the leader node, for reading back one's own writes on a cluster.
func (s *Store) readStream(ctx context.Context, c *esdb.Client, stream string, from, count uint64, leader bool) ([]eventstore.RecordedEvent, error) {
	return s.readRaw(ctx, c, stream, esdb.ReadStreamOptions{Direction: esdb.Forwards, From: esdb.Revision(from), RequiresLeader: leader}, count)
}

func (s *Store) readRaw(ctx context.Context, c *esdb.Client, stream string, opts esdb.ReadStreamOptions, count uint64) ([]eventstore.RecordedEvent, error) {
	op := "read " + stream
	rs, err := c.ReadStream(ctx, stream, opts, count)
	if err != nil {
		s.renew(c, err)
		return nil, readError(ctx, op, err)
	}
	defer rs.Close()
	var out []eventstore.RecordedEvent
	for {
		ev, err := recv(rs)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			s.renew(c, err)
			return nil, readError(ctx, op, err)
		}
		if e := ev.OriginalEvent(); e != nil {
			out = append(out, recorded(e))
		}
	}
}

// readError translates a stream read's error; a deleted stream is also not
// found, as the port defines it.
func readError(ctx context.Context, op string, err error) error {
	return deletedIsMissing(translate(ctx, op, err))
}

func deletedIsMissing(err error) error {
	if errors.Is(err, ErrStreamDeleted) {
		return fmt.Errorf("%w: %w", err, eventstore.ErrStreamNotFound)
	}
	return err
}

// ReadAll implements eventstore.Store over $all. The server's own records
// ($-prefixed types) are skipped here, since the client reads $all without a
// server-side filter; a run of them costs extra round trips, not events.
func (s *Store) ReadAll(ctx context.Context, after eventstore.Position, limit int) ([]eventstore.RecordedEvent, error) {
	if limit <= 0 {
		return nil, nil
	}
	c, err := s.conn()
	if err != nil {
		return nil, fmt.Errorf("read $all: %w", err)
	}
	var out []eventstore.RecordedEvent
	// $all is read from a position inclusive of it; the cursor is the last
	// position handled, whose record a following batch repeats first.
	cursor, inclusive := after, after == eventstore.Start
	for {
		// +1 for the repeated record at the cursor.
		batch := uint64(max(limit-len(out)+1, s.cfg.ReadBatch))
		records, err := s.readAllRaw(ctx, c, esdb.ReadAllOptions{Direction: esdb.Forwards, From: allPosition(cursor)}, batch)
		if err != nil {
			return nil, err
		}
		for _, e := range records {
			p := position(e.Position)
			if !inclusive && !cursor.Less(p) {
				continue
			}
			cursor, inclusive = p, false
			if e.EventType == "" || isSystem(e.EventType) {
				continue
			}
			out = append(out, recorded(e))
			if len(out) == limit {
				return out, nil
			}
		}
		if uint64(len(records)) < batch {
			return out, nil
		}
	}
}

func (s *Store) readAllRaw(ctx context.Context, c *esdb.Client, opts esdb.ReadAllOptions, count uint64) ([]*esdb.RecordedEvent, error) {
	const op = "read $all"
	rs, err := c.ReadAll(ctx, opts, count)
	if err != nil {
		s.renew(c, err)
		return nil, translate(ctx, op, err)
	}
	defer rs.Close()
	var out []*esdb.RecordedEvent
	for {
		ev, err := recv(rs)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			s.renew(c, err)
			return nil, translate(ctx, op, err)
		}
		if e := ev.OriginalEvent(); e != nil {
			out = append(out, e)
		}
	}
}

// recv is rs.Recv, which panics on a reply it does not know (the client
// marks that case unreachable); a newer server must not bring the process
// down, so that becomes an error.
func recv(rs *esdb.ReadStream) (ev *esdb.ResolvedEvent, err error) {
	defer func() {
		if r := recover(); r != nil {
			ev, err = nil, fmt.Errorf("unexpected reply from server: %v: %w", r, ErrServer)
		}
	}()
	return rs.Recv()
}

// WaitForEvents implements eventstore.Store with a catch-up subscription to
// $all from after, filtered on the server to exclude its own records. It
// returns at the first event the subscription delivers: at once when events
// after that position exist, otherwise when one is appended.
func (s *Store) WaitForEvents(ctx context.Context, after eventstore.Position) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c, err := s.conn()
	if err != nil {
		return fmt.Errorf("subscribe to $all: %w", err)
	}
	sub, err := c.SubscribeToAll(ctx, esdb.SubscribeToAllOptions{
		From:   allPosition(after),
		Filter: esdb.ExcludeSystemEventsFilter(),
	})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.renew(c, err)
		return translate(ctx, "subscribe to $all", err)
	}
	defer sub.Close()
	for {
		ev := sub.Recv()
		switch {
		case ev.EventAppeared != nil:
			// The server starts after the position; an event at it
			// would only make callers spin, so it does not count.
			if e := ev.EventAppeared.OriginalEvent(); e != nil && after != eventstore.Start && !after.Less(position(e.Position)) {
				continue
			}
			return nil
		case ev.SubscriptionDropped != nil:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			s.renew(c, ev.SubscriptionDropped.Error)
			return translate(ctx, "subscription to $all", ev.SubscriptionDropped.Error)
		}
		// Checkpoints, caught-up and fell-behind notices: keep waiting.
	}
}

// ReadStreams returns the events of every stream of names that exists,
// each in revision order: ReadStream of each name, one after another (the
// server's protocol reads one stream a call).
func (s *Store) ReadStreams(ctx context.Context, names []string) (map[string][]eventstore.RecordedEvent, error) {
	out := make(map[string][]eventstore.RecordedEvent, len(names))
	for _, name := range names {
		events, err := s.ReadStream(ctx, name, 0)
		switch {
		case errors.Is(err, eventstore.ErrStreamNotFound):
		case err != nil:
			return nil, err
		default:
			out[name] = events
		}
	}
	return out, nil
}
