package runner

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Errors returned by Content.
var (
	// ErrContentPurged: the review exists but its content is no longer
	// stored (purged after Config.PayloadRetention, or never stored
	// because a submission crashed between its steps).
	ErrContentPurged = errors.New("content purged")
	// ErrContentMismatch: the stored content is not the content the ledger
	// recorded (its digest differs from the Submitted event's). It must
	// never be served as the reviewed content.
	ErrContentMismatch = errors.New("stored content does not match the ledger's digest")
)

// Content returns a review's submitted content for a moderator to read:
// the content type recorded in the ledger, the stored bytes and their
// digest ("sha256:<hex>"), which equals the ledger's Submitted
// payload_digest. The bytes are checked against that digest before they
// are returned.
//
// Errors: domain.ErrReviewNotFound when the review has no stream,
// ErrContentPurged when its content is no longer stored,
// ErrContentMismatch when the stored bytes are not the ones reviewed.
func (s *Service) Content(ctx context.Context, reviewID string) (contentType string, content []byte, digest string, err error) {
	rv, err := s.ledger.Load(ctx, reviewID)
	if err != nil {
		return "", nil, "", err
	}
	pl, err := s.state.storedPayload(ctx, reviewID)
	if err != nil {
		return "", nil, "", err
	}
	want := rv.PayloadDigest()
	if pl.Digest != want {
		return "", nil, "", fmt.Errorf("review %q: stored digest %s, ledger %s: %w", reviewID, pl.Digest, want, ErrContentMismatch)
	}
	if got := Digest(pl.Content); got != want {
		return "", nil, "", fmt.Errorf("review %q: stored bytes hash to %s, ledger %s: %w", reviewID, got, want, ErrContentMismatch)
	}
	return rv.ContentType(), pl.Content, want, nil
}

// storedPayload reads a review's stored payload as it is, whatever its
// digest; ErrContentPurged when there is none.
func (p *pgState) storedPayload(ctx context.Context, reviewID string) (payload, error) {
	var pl payload
	err := p.pool.QueryRow(ctx, `SELECT digest, content_type, content FROM runner_payload WHERE review_id = $1`, reviewID).
		Scan(&pl.Digest, &pl.ContentType, &pl.Content)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return payload{}, fmt.Errorf("review %q: %w", reviewID, ErrContentPurged)
	case err != nil:
		return payload{}, fmt.Errorf("read content of %q: %w", reviewID, err)
	}
	return pl, nil
}
