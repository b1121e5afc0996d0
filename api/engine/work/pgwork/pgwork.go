// Package pgwork is the engine's storage in PostgreSQL: work records
// (review_work), content (review_payload) and callback deliveries
// (callback_delivery), migration 0011. Its Committer writes a batch of
// ledger appends and their work-record changes in one transaction and one
// round trip when the ledger is pgstore in the same database; with another
// ledger (KurrentDB) it orders the writes so that a stream never exists
// without its record and content.
package pgwork

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/api/engine/work"
	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/pgstore"
	"github.com/reviewledger/reviewledger/eventstore/storeerr"
)

var _ work.Store = (*Store)(nil)

// Store is work.Store in PostgreSQL.
type Store struct {
	pool   *pgxpool.Pool
	events eventstore.Store
	// pg is events when it is pgstore on the same database: commits are
	// then one transaction.
	pg *pgstore.Store
}

// New returns the store of the database behind pool, committing appends to
// events. Pass the pgstore.Store of the same pool for atomic commits.
func New(pool *pgxpool.Pool, events eventstore.Store) *Store {
	s := &Store{pool: pool, events: events}
	if pg, ok := events.(*pgstore.Store); ok {
		s.pg = pg
	}
	return s
}

// Atomic implements work.Store.
func (s *Store) Atomic() bool { return s.pg != nil }

// claimSQL takes records and returns them with their content. %s is the
// selection of the records, locked with SKIP LOCKED so processes claiming
// at once never take the same record.
const claimSQL = `
WITH picked AS (
	SELECT review_id FROM review_work
	WHERE %s AND (owner_id IS NULL OR lease_until < $1)
	ORDER BY due_at
	LIMIT $4
	FOR UPDATE SKIP LOCKED
), claimed AS (
	UPDATE review_work w SET owner_id = $2, lease_until = $3
	FROM picked WHERE w.review_id = picked.review_id
	RETURNING w.review_id, w.deadline, w.due_at, w.awaiting
)
SELECT c.review_id, c.deadline, c.due_at, c.awaiting, p.digest, p.content_type, p.content
FROM claimed c LEFT JOIN review_payload p USING (review_id)
ORDER BY c.due_at`

var (
	claimDue      = fmt.Sprintf(claimSQL, `due_at <= $1`)
	claimIDs      = fmt.Sprintf(claimSQL, `due_at <= $1 AND review_id = ANY($5::text[])`)
	claimDeadline = fmt.Sprintf(claimSQL, `deadline < $5`)
)

// Claim implements work.Store.
func (s *Store) Claim(ctx context.Context, q work.Query) ([]work.Claimed, error) {
	var limit *int
	if q.Limit > 0 {
		limit = &q.Limit
	}
	args := []any{q.Now, q.Owner, q.LeaseUntil, limit}
	query := claimDue
	switch {
	case q.IDs != nil:
		query, args = claimIDs, append(args, q.IDs)
	case !q.DeadlineBefore.IsZero():
		query, args = claimDeadline, append(args, q.DeadlineBefore)
	}
	rows, _ := s.pool.Query(ctx, query, args...)
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (work.Claimed, error) {
		var (
			c                   work.Claimed
			digest, contentType *string
			content             []byte
		)
		if err := row.Scan(&c.ReviewID, &c.Deadline, &c.DueAt, &c.Awaiting, &digest, &contentType, &content); err != nil {
			return c, err
		}
		c.Owner, c.LeaseUntil = q.Owner, q.LeaseUntil
		if digest != nil {
			c.Payload = &work.Payload{Digest: *digest, ContentType: *contentType, Content: nonNil(content)}
		}
		return c, nil
	})
	if err != nil {
		return nil, storeerr.Wrap(ctx, "claim work", err)
	}
	return out, nil
}

// renewSQL extends the leases of the named records owner holds, skipping
// those another transaction is writing (its review's step committing:
// waiting for it would hold up the very work renewed), in a fixed order,
// and returns every record named that owner holds, with whether it was
// extended.
const renewSQL = `
WITH extended AS (
	UPDATE review_work w SET lease_until = $3
	FROM (SELECT review_id FROM review_work WHERE owner_id = $1 AND review_id = ANY($2::text[])
		ORDER BY review_id FOR UPDATE SKIP LOCKED) l
	WHERE w.review_id = l.review_id
	RETURNING w.review_id
)
SELECT r.review_id, e.review_id IS NOT NULL
FROM review_work r LEFT JOIN extended e USING (review_id)
WHERE r.owner_id = $1 AND r.review_id = ANY($2::text[])`

// Renew implements work.Store.
func (s *Store) Renew(ctx context.Context, owner string, reviewIDs []string, until time.Time) ([]string, []string, error) {
	if len(reviewIDs) == 0 {
		return nil, nil, nil
	}
	rows, _ := s.pool.Query(ctx, renewSQL, owner, reviewIDs, until)
	var (
		renewed, held []string
		id            string
		extended      bool
	)
	_, err := pgx.ForEachRow(rows, []any{&id, &extended}, func() error {
		held = append(held, id)
		if extended {
			renewed = append(renewed, id)
		}
		return nil
	})
	if err != nil {
		return nil, nil, storeerr.Wrap(ctx, "renew leases", err)
	}
	return renewed, held, nil
}

// Park implements work.Store.
func (s *Store) Park(ctx context.Context, owner, reviewID string, until time.Time, awaiting int) error {
	_, err := s.pool.Exec(ctx, `UPDATE review_work SET due_at = $3, awaiting = $4, owner_id = NULL, lease_until = NULL
		WHERE review_id = $2 AND owner_id = $1`, owner, reviewID, until, awaiting)
	return storeerr.Wrap(ctx, "park "+reviewID, err)
}

// Release implements work.Store.
func (s *Store) Release(ctx context.Context, owner string, reviewIDs []string, now time.Time) error {
	_, err := s.pool.Exec(ctx, `UPDATE review_work SET owner_id = NULL, lease_until = NULL, due_at = least(due_at, $3)
		WHERE owner_id = $1 AND ($2::text[] IS NULL OR review_id = ANY($2::text[]))`, owner, reviewIDs, now)
	return storeerr.Wrap(ctx, "release leases", err)
}

// Ensure implements work.Store.
func (s *Store) Ensure(ctx context.Context, reviewID string, deadline, now time.Time) (bool, error) {
	tag, err := s.pool.Exec(ctx, `INSERT INTO review_work (review_id, deadline, due_at) VALUES ($1, $2, $3)
		ON CONFLICT (review_id) DO NOTHING`, reviewID, deadline, now)
	if err != nil {
		return false, storeerr.Wrap(ctx, "ensure work of "+reviewID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Done implements work.Store.
func (s *Store) Done(ctx context.Context, reviewID string) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM review_work WHERE review_id = $1`, reviewID)
	return storeerr.Wrap(ctx, "clear work of "+reviewID, err)
}

// Count implements work.Store.
func (s *Store) Count(ctx context.Context) (int, error) {
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM review_work`).Scan(&n); err != nil {
		return 0, storeerr.Wrap(ctx, "count work", err)
	}
	return n, nil
}

// Payload implements work.Store.
func (s *Store) Payload(ctx context.Context, reviewID string) (work.Payload, error) {
	var p work.Payload
	err := s.pool.QueryRow(ctx, `SELECT digest, content_type, content FROM review_payload WHERE review_id = $1`, reviewID).
		Scan(&p.Digest, &p.ContentType, &p.Content)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return work.Payload{}, fmt.Errorf("review %q: %w", reviewID, work.ErrPayloadMissing)
	case err != nil:
		return work.Payload{}, storeerr.Wrap(ctx, "read content of "+reviewID, err)
	}
	p.Content = nonNil(p.Content)
	return p, nil
}

// purgeBatch is how many contents one statement of PurgePayloads deletes
// at most.
const purgeBatch = 10000

// purgeSQL deletes the oldest purgeBatch contents stored before $1, from
// $2 on, whose review has no work record, and returns how many it deleted
// and the latest stored_at among them. The outer conditions repeat the
// inner ones, so that a content stored again meanwhile (a resubmission
// writes its row anew) is checked as it is now, not as the batch saw it.
var purgeSQL = fmt.Sprintf(`WITH gone AS (
	DELETE FROM review_payload p
	WHERE p.review_id IN (
		SELECT q.review_id FROM review_payload q
		WHERE q.stored_at < $1 AND q.stored_at >= $2
			AND NOT EXISTS (SELECT 1 FROM review_work w WHERE w.review_id = q.review_id)
		ORDER BY q.stored_at
		LIMIT %d)
		AND p.stored_at < $1
		AND NOT EXISTS (SELECT 1 FROM review_work w WHERE w.review_id = p.review_id)
	RETURNING p.stored_at
)
SELECT count(*), coalesce(max(stored_at), $2) FROM gone`, purgeBatch)

// PurgePayloads implements work.Store. It deletes in statements of
// purgeBatch contents, each its own transaction, oldest first, each from
// where the one before ended, until one deletes fewer. As one statement
// for every content past the retention it held its snapshot for as long
// as it ran, and autovacuum could not clean review_work meanwhile, which
// the reviews still arriving filled with dead rows: at 3,000,000 reviews
// such a purge had not ended after 17 minutes (docs/benchmarks.md, "At
// scale").
func (s *Store) PurgePayloads(ctx context.Context, cutoff time.Time) (int64, error) {
	var (
		total int64
		from  time.Time // the oldest at first
	)
	for {
		var n int64
		if err := s.pool.QueryRow(ctx, purgeSQL, cutoff, from).Scan(&n, &from); err != nil {
			return total, storeerr.Wrap(ctx, "purge content", err)
		}
		total += n
		if n < purgeBatch {
			return total, nil
		}
	}
}

// SeeDelivery implements work.Store.
func (s *Store) SeeDelivery(ctx context.Context, webhookID, reviewID string, now time.Time) (bool, string, error) {
	tag, err := s.pool.Exec(ctx, `INSERT INTO callback_delivery (webhook_id, review_id, received_at) VALUES ($1, $2, $3)
		ON CONFLICT (webhook_id, review_id) DO NOTHING`, webhookID, reviewID, now)
	if err != nil {
		return false, "", storeerr.Wrap(ctx, "record webhook id", err)
	}
	if tag.RowsAffected() == 1 {
		return true, "", nil
	}
	var outcome string
	err = s.pool.QueryRow(ctx, `SELECT outcome FROM callback_delivery WHERE webhook_id = $1 AND review_id = $2`, webhookID, reviewID).Scan(&outcome)
	if err != nil {
		return false, "", storeerr.Wrap(ctx, "read webhook id", err)
	}
	return false, outcome, nil
}

// SetDeliveryOutcome implements work.Store.
func (s *Store) SetDeliveryOutcome(ctx context.Context, webhookID, reviewID, outcome string) error {
	_, err := s.pool.Exec(ctx, `UPDATE callback_delivery SET outcome = $3 WHERE webhook_id = $1 AND review_id = $2`, webhookID, reviewID, outcome)
	return storeerr.Wrap(ctx, "record webhook outcome", err)
}

// ForgetDelivery implements work.Store.
func (s *Store) ForgetDelivery(ctx context.Context, webhookID, reviewID string) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM callback_delivery WHERE webhook_id = $1 AND review_id = $2 AND outcome = ''`, webhookID, reviewID)
	return storeerr.Wrap(ctx, "forget webhook id", err)
}

// PurgeDeliveries implements work.Store.
func (s *Store) PurgeDeliveries(ctx context.Context, cutoff time.Time) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM callback_delivery WHERE received_at < $1`, cutoff)
	return storeerr.Wrap(ctx, "purge webhook ids", err)
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// Ledger returns a ledger over the store's events that commits through the
// store, so that a review's events and its work record change together.
func (s *Store) Ledger(gc ledger.GroupCommit) *ledger.Ledger {
	return ledger.New(s.events, ledger.Options{Committer: s, GroupCommit: gc})
}
