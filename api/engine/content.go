package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/reviewledger/reviewledger/api/engine/work"
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
func (e *Engine) Content(ctx context.Context, reviewID string) (contentType string, content []byte, digest string, err error) {
	snap, err := e.ledger.Load(ctx, reviewID)
	if err != nil {
		return "", nil, "", err
	}
	pl, err := e.store.Payload(ctx, reviewID)
	if errors.Is(err, work.ErrPayloadMissing) {
		return "", nil, "", fmt.Errorf("review %q: %w", reviewID, ErrContentPurged)
	}
	if err != nil {
		return "", nil, "", err
	}
	want := snap.PayloadDigest()
	if pl.Digest != want {
		return "", nil, "", fmt.Errorf("review %q: stored digest %s, ledger %s: %w", reviewID, pl.Digest, want, ErrContentMismatch)
	}
	if got := Digest(pl.Content); got != want {
		return "", nil, "", fmt.Errorf("review %q: stored bytes hash to %s, ledger %s: %w", reviewID, got, want, ErrContentMismatch)
	}
	return snap.ContentType(), pl.Content, want, nil
}
