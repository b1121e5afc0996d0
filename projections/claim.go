package projections

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

var (
	// ErrClaimedByOther is returned when another moderator holds a live
	// claim on the review (HTTP 409). The error is a *ClaimedError.
	ErrClaimedByOther = errors.New("claimed by another moderator")
	// ErrNotInQueue is returned when claiming a review that is not in the
	// manual queue (unknown, still pending, or decided).
	ErrNotInQueue = errors.New("review is not in the manual queue")
)

// ClaimedError reports the live claim that refused a new one.
type ClaimedError struct {
	ReviewID  string
	Moderator string
	ExpiresAt time.Time
}

func (e *ClaimedError) Error() string {
	return fmt.Sprintf("review %s: claimed by %s until %s: %v", e.ReviewID, e.Moderator, e.ExpiresAt.UTC().Format(time.RFC3339), ErrClaimedByOther)
}

// Is makes errors.Is(err, ErrClaimedByOther) true.
func (e *ClaimedError) Is(target error) bool { return target == ErrClaimedByOther }

// Claim is a moderator's lease on a review in the manual queue.
type Claim struct {
	ReviewID  string    `json:"review_id"`
	Moderator string    `json:"claimed_by"`
	ClaimedAt time.Time `json:"claimed_at"`
	ExpiresAt time.Time `json:"claim_expires_at"`
}

// Claim gives moderator a lease on the review until now+lease. The holder
// of a live claim may renew it (its ClaimedAt stays); another moderator may
// take the review only once the lease has expired.
//
// Errors: *ClaimedError (ErrClaimedByOther), ErrNotInQueue, and
// ErrInvalidQuery naming "moderator" or "lease".
//
// Claims live in a table of their own, so rebuilding the queue keeps them;
// a claim on a review that has left the queue is ignored.
func (db *DB) Claim(ctx context.Context, reviewID, moderator string, lease time.Duration, now time.Time) (Claim, error) {
	switch {
	case moderator == "":
		return Claim{}, invalid("moderator", "must not be empty")
	case lease <= 0:
		return Claim{}, invalid("lease", "must be a positive duration, got %s", lease)
	}
	var c Claim
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `INSERT INTO manual_claim AS c (review_id, moderator, claimed_at, expires_at)
			SELECT review_id, $2, $3, $4 FROM manual_queue WHERE review_id = $1
			ON CONFLICT (review_id) DO UPDATE SET
				moderator = EXCLUDED.moderator,
				claimed_at = CASE WHEN c.moderator = EXCLUDED.moderator AND c.expires_at > EXCLUDED.claimed_at
					THEN c.claimed_at ELSE EXCLUDED.claimed_at END,
				expires_at = EXCLUDED.expires_at
			WHERE c.moderator = EXCLUDED.moderator OR c.expires_at <= EXCLUDED.claimed_at
			RETURNING review_id, moderator, claimed_at, expires_at`,
			reviewID, moderator, now, now.Add(lease)).Scan(&c.ReviewID, &c.Moderator, &c.ClaimedAt, &c.ExpiresAt)
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		// Nothing written: not queued, or someone else's live claim.
		held := &ClaimedError{ReviewID: reviewID}
		err = tx.QueryRow(ctx, `SELECT c.moderator, c.expires_at FROM manual_queue q
			JOIN manual_claim c ON c.review_id = q.review_id WHERE q.review_id = $1`, reviewID).
			Scan(&held.Moderator, &held.ExpiresAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("claim %s: %w", reviewID, ErrNotInQueue)
		}
		if err != nil {
			return err
		}
		return held
	})
	if err != nil {
		var held *ClaimedError
		if errors.As(err, &held) || errors.Is(err, ErrNotInQueue) {
			return Claim{}, err
		}
		return Claim{}, dbErr(ctx, "claim "+reviewID, err)
	}
	return c, nil
}
