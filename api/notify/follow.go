package notify

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reviewledger/reviewledger/eventstore"
)

// checkpointName is the notifier's row in notify_checkpoint.
const checkpointName = "webhooks"

// headReader is a store that can say where its global order ends now
// (pgstore, memstore).
type headReader interface {
	Head(ctx context.Context) (eventstore.Position, error)
}

// follow reads the ledger's global order from the checkpoint on and turns
// each batch into deliveries, committed with the checkpoint's move, until
// ctx is done (nil) or a read or a commit fails. It tells the sender of new
// deliveries through kick.
func (n *Notifier) follow(ctx context.Context, kick chan<- struct{}) error {
	pos, err := n.checkpoint(ctx)
	if err != nil {
		return err
	}
	for ctx.Err() == nil {
		recs, err := n.cfg.Store.ReadAll(ctx, pos, n.cfg.BatchSize)
		if err != nil {
			return fmt.Errorf("notify: read the ledger after %s: %w", pos, err)
		}
		if len(recs) == 0 {
			wctx, cancel := context.WithTimeout(ctx, n.cfg.PollInterval)
			err := n.cfg.Store.WaitForEvents(wctx, pos)
			cancel()
			if err != nil && ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("notify: wait for events after %s: %w", pos, err)
			}
			continue
		}
		ds, err := build(ctx, n.cfg.Histories, recs)
		if err != nil {
			return err
		}
		last := recs[len(recs)-1].Position
		stored, err := n.commit(ctx, pos, last, len(recs), ds)
		if err != nil {
			return err
		}
		if stored != last {
			n.log.Warn("notifier checkpoint moved by another process; reading on from it", "expected", pos, "stored", stored)
		} else if len(ds) > 0 {
			n.metrics.created.Add(float64(len(ds)))
			select {
			case kick <- struct{}{}:
			default:
			}
		}
		pos = stored
	}
	return nil
}

// checkpoint returns where the notifier's checkpoint stands, creating it
// when the notifier never ran: at the end of the ledger (FromNow, when the
// store can tell it) or at its start.
func (n *Notifier) checkpoint(ctx context.Context) (eventstore.Position, error) {
	pos, err := n.readCheckpoint(ctx)
	if !errors.Is(err, pgx.ErrNoRows) {
		return pos, err
	}
	start := eventstore.Start
	if n.cfg.From == FromNow {
		if hr, ok := n.cfg.Store.(headReader); ok {
			if start, err = hr.Head(ctx); err != nil {
				return eventstore.Position{}, fmt.Errorf("notify: read the head of the ledger: %w", err)
			}
		} else {
			n.log.Warn("the event store cannot tell where its global order ends; the notifier starts at its beginning")
		}
	}
	if _, err := n.cfg.Pool.Exec(ctx, `INSERT INTO notify_checkpoint (name, position_commit, position_prepare) VALUES ($1, $2, $3)
		ON CONFLICT (name) DO NOTHING`, checkpointName, int64(start.Commit), int64(start.Prepare)); err != nil {
		return eventstore.Position{}, fmt.Errorf("notify: create the checkpoint: %w", err)
	}
	n.log.Info("notifier checkpoint created", "from", n.cfg.From, "position", start)
	return n.readCheckpoint(ctx)
}

func (n *Notifier) readCheckpoint(ctx context.Context) (eventstore.Position, error) {
	var c, p int64
	err := n.cfg.Pool.QueryRow(ctx, `SELECT position_commit, position_prepare FROM notify_checkpoint WHERE name = $1`, checkpointName).Scan(&c, &p)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return eventstore.Position{}, fmt.Errorf("notify: read the checkpoint: %w", err)
	}
	return eventstore.Position{Commit: uint64(c), Prepare: uint64(p)}, err
}

// commit inserts the deliveries and moves the checkpoint from from to to,
// over n events, in one transaction, and returns where the checkpoint
// stands: to, or, when it was not at from (moved by another process),
// where it is, with nothing written. A delivery already there (same
// webhook-id, or same review and revision) is left as it is.
func (n *Notifier) commit(ctx context.Context, from, to eventstore.Position, events int, ds []delivery) (eventstore.Position, error) {
	stored := to
	now := n.cfg.Now()
	err := pgx.BeginFunc(ctx, n.cfg.Pool, func(tx pgx.Tx) error {
		var c, p int64
		if err := tx.QueryRow(ctx, `SELECT position_commit, position_prepare FROM notify_checkpoint WHERE name = $1 FOR UPDATE`,
			checkpointName).Scan(&c, &p); err != nil {
			return fmt.Errorf("lock the checkpoint: %w", err)
		}
		if at := (eventstore.Position{Commit: uint64(c), Prepare: uint64(p)}); at != from {
			stored = at
			return nil
		}
		if len(ds) > 0 {
			if err := insertDeliveries(ctx, tx, ds, now); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `UPDATE notify_checkpoint SET position_commit = $2, position_prepare = $3,
			events = events + $4, updated_at = now() WHERE name = $1`, checkpointName, int64(to.Commit), int64(to.Prepare), events)
		if err != nil {
			return fmt.Errorf("move the checkpoint: %w", err)
		}
		return nil
	})
	if err != nil {
		return eventstore.Position{}, fmt.Errorf("notify: commit the batch after %s: %w", from, err)
	}
	return stored, nil
}

func insertDeliveries(ctx context.Context, tx pgx.Tx, ds []delivery, now time.Time) error {
	var (
		ids, reviews, types, bodies = make([]string, len(ds)), make([]string, len(ds)), make([]string, len(ds)), make([]string, len(ds))
		revisions                   = make([]int64, len(ds))
		created                     = make([]time.Time, len(ds))
	)
	for i, d := range ds {
		ids[i], reviews[i], types[i], bodies[i] = d.id, d.reviewID, d.eventType, string(d.body)
		revisions[i], created[i] = int64(d.revision), d.createdAt
	}
	_, err := tx.Exec(ctx, `INSERT INTO notify_delivery (id, review_id, revision, event_type, body, created_at, retry_since, next_attempt_at)
		SELECT u.id, u.review_id, u.revision, u.event_type, u.body, u.created_at, $7, $7
		FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::timestamptz[])
			AS u(id, review_id, revision, event_type, body, created_at)
		ON CONFLICT DO NOTHING`, ids, reviews, revisions, types, bodies, created, now)
	if err != nil {
		return fmt.Errorf("insert %d deliveries: %w", len(ds), err)
	}
	return nil
}
