package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// errPayloadMissing: the review's content is not stored (purged, or lost to
// a crash between submission steps). Such a review cannot be reviewed
// automatically.
var errPayloadMissing = errors.New("payload missing")

// pgState is the runner's own PostgreSQL tables (migration 0010_runner).
type pgState struct {
	pool *pgxpool.Pool
}

type payload struct {
	Digest      string
	ContentType string
	Content     []byte
}

// stage stores the payload (unless one is already stored for the review)
// and marks the review pending, in one transaction, before its stream is
// created.
func (p *pgState) stage(ctx context.Context, reviewID, class string, pl payload, deadline, now time.Time) error {
	if pl.Content == nil {
		pl.Content = []byte{} // empty content is content, not NULL
	}
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO runner_payload (review_id, digest, content_type, content, stored_at)
			VALUES ($1, $2, $3, $4, $5) ON CONFLICT (review_id) DO NOTHING`,
			reviewID, pl.Digest, pl.ContentType, pl.Content, now); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO runner_pending (review_id, content_class, deadline, created_at)
			VALUES ($1, $2, $3, $4) ON CONFLICT (review_id) DO NOTHING`, reviewID, class, deadline, now)
		return err
	})
	if err != nil {
		return fmt.Errorf("stage review %q: %w", reviewID, err)
	}
	return nil
}

// claimPayload makes the stored payload the creator's: only the process
// whose append created the stream calls it, so a leftover from an earlier
// failed submission with other content is replaced, and nothing else is.
func (p *pgState) claimPayload(ctx context.Context, reviewID string, pl payload, deadline, now time.Time) error {
	if pl.Content == nil {
		pl.Content = []byte{}
	}
	_, err := p.pool.Exec(ctx, `UPDATE runner_payload SET digest = $2, content_type = $3, content = $4, stored_at = $5
		WHERE review_id = $1 AND digest <> $2`, reviewID, pl.Digest, pl.ContentType, pl.Content, now)
	if err == nil {
		_, err = p.pool.Exec(ctx, `UPDATE runner_pending SET deadline = $2 WHERE review_id = $1`, reviewID, deadline)
	}
	if err != nil {
		return fmt.Errorf("store payload of %q: %w", reviewID, err)
	}
	return nil
}

// payload returns the stored content of a review if its digest matches.
func (p *pgState) payload(ctx context.Context, reviewID, digest string) (payload, error) {
	var pl payload
	err := p.pool.QueryRow(ctx, `SELECT digest, content_type, content FROM runner_payload WHERE review_id = $1`, reviewID).
		Scan(&pl.Digest, &pl.ContentType, &pl.Content)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return payload{}, fmt.Errorf("review %q: %w", reviewID, errPayloadMissing)
	case err != nil:
		return payload{}, fmt.Errorf("read payload of %q: %w", reviewID, err)
	case pl.Digest != digest:
		return payload{}, fmt.Errorf("review %q: stored digest differs from the ledger's: %w", reviewID, errPayloadMissing)
	}
	return pl, nil
}

// done removes a review from the pending set.
func (p *pgState) done(ctx context.Context, reviewID string) error {
	if _, err := p.pool.Exec(ctx, `DELETE FROM runner_pending WHERE review_id = $1`, reviewID); err != nil {
		return fmt.Errorf("clear pending %q: %w", reviewID, err)
	}
	return nil
}

// pending lists pending reviews whose deadline is before the given time,
// earliest deadline first, at most limit.
func (p *pgState) pending(ctx context.Context, before time.Time, limit int) ([]string, error) {
	rows, err := p.pool.Query(ctx, `SELECT review_id FROM runner_pending WHERE deadline < $1 ORDER BY deadline LIMIT $2`, before, limit)
	if err != nil {
		return nil, fmt.Errorf("list pending reviews: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list pending reviews: %w", err)
	}
	return ids, nil
}

// PurgePayloads deletes content stored before cutoff whose review is no
// longer pending, and returns how many were deleted.
func (p *pgState) purgePayloads(ctx context.Context, cutoff time.Time) (int64, error) {
	tag, err := p.pool.Exec(ctx, `DELETE FROM runner_payload p WHERE p.stored_at < $1
		AND NOT EXISTS (SELECT 1 FROM runner_pending r WHERE r.review_id = p.review_id)`, cutoff)
	if err != nil {
		return 0, fmt.Errorf("purge payloads: %w", err)
	}
	return tag.RowsAffected(), nil
}

func (p *pgState) purgeWebhooks(ctx context.Context, cutoff time.Time) error {
	if _, err := p.pool.Exec(ctx, `DELETE FROM runner_webhook WHERE received_at < $1`, cutoff); err != nil {
		return fmt.Errorf("purge webhook ids: %w", err)
	}
	return nil
}

// Webhook outcomes stored for de-duplication.
const (
	webhookApplied  = "applied"
	webhookConflict = "conflict"
	webhookInvalid  = "invalid"
)

// seeWebhook records a webhook-id. It returns false and the outcome stored
// with it when the id was seen before.
func (p *pgState) seeWebhook(ctx context.Context, id, reviewID string, now time.Time) (first bool, outcome string, err error) {
	tag, err := p.pool.Exec(ctx, `INSERT INTO runner_webhook (webhook_id, review_id, received_at) VALUES ($1, $2, $3)
		ON CONFLICT (webhook_id) DO NOTHING`, id, reviewID, now)
	if err != nil {
		return false, "", fmt.Errorf("record webhook id: %w", err)
	}
	if tag.RowsAffected() == 1 {
		return true, "", nil
	}
	err = p.pool.QueryRow(ctx, `SELECT outcome FROM runner_webhook WHERE webhook_id = $1`, id).Scan(&outcome)
	if err != nil {
		return false, "", fmt.Errorf("read webhook id: %w", err)
	}
	return false, outcome, nil
}

func (p *pgState) webhookOutcome(ctx context.Context, id, outcome string) error {
	if _, err := p.pool.Exec(ctx, `UPDATE runner_webhook SET outcome = $2 WHERE webhook_id = $1`, id, outcome); err != nil {
		return fmt.Errorf("record webhook outcome: %w", err)
	}
	return nil
}

// forgetWebhook removes an id whose processing failed for a reason other
// than its content (the database, a cancelled request), so that the
// provider's redelivery is processed.
func (p *pgState) forgetWebhook(ctx context.Context, id string) {
	_, _ = p.pool.Exec(ctx, `DELETE FROM runner_webhook WHERE webhook_id = $1 AND outcome = ''`, id)
}
