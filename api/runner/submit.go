package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

// SubmitRequest is a review to open.
type SubmitRequest struct {
	ReviewID, ContentClass, ContentType string
	Content                             []byte
	Actor                               ledger.Actor
}

// Digest is the payload digest recorded in Submitted: "sha256:<hex>".
func Digest(content []byte) string {
	sum := sha256.Sum256(content)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Submit validates a submission, stores its content once, creates the
// review's stream (expected revision NoStream) and publishes it to the
// workers. Submitting the same review again (same ID, class and content)
// returns the current review with created false.
//
// Errors: *domain.FieldError wrapping domain.ErrInvalidReviewID,
// domain.ErrUnknownClass for a class not in the policy, domain.ErrReviewExists
// for the same ID with another class or content.
func (s *Service) Submit(ctx context.Context, req SubmitRequest) (rv *ledger.Review, created bool, err error) {
	if err := domain.ValidateReviewID(req.ReviewID); err != nil {
		return nil, false, err
	}
	class, err := s.cfg.Policy.Class(req.ContentClass)
	if err != nil {
		return nil, false, err
	}
	now := s.clock.Now()
	pl := payload{Digest: Digest(req.Content), ContentType: req.ContentType, Content: req.Content}
	ev, err := domain.Submit(domain.SubmitCommand{
		ReviewID: req.ReviewID, ContentClass: req.ContentClass, ContentType: req.ContentType,
		PayloadDigest: pl.Digest, PayloadBytes: len(req.Content), Policy: class,
		SubmittedBy: req.Actor.Name, Now: now,
	})
	if err != nil {
		return nil, false, err
	}
	// A review submitted before is answered from the ledger without
	// touching the pending set: a retried or conflicting submit must not
	// mark a decided review pending again.
	if existing, err := s.ledger.Load(ctx, req.ReviewID); err == nil {
		return s.resubmitted(existing, req, pl.Digest)
	} else if !errors.Is(err, domain.ErrReviewNotFound) {
		return nil, false, err
	}
	// Content and the pending mark go first: a review whose stream exists
	// always has both (a crash in between leaves only rows that the
	// sweeper clears).
	if err := s.state.stage(ctx, req.ReviewID, req.ContentClass, pl, ev.Deadline, now); err != nil {
		return nil, false, err
	}
	rv, err = s.ledger.Create(ctx, ev, req.Actor)
	if errors.Is(err, eventstore.ErrWrongExpectedVersion) {
		// Another submit of the same ID won the race. Ours staged a
		// pending mark too (the same row); clear it if the winner's
		// review has already left pending.
		existing, lerr := s.ledger.Load(ctx, req.ReviewID)
		if lerr != nil {
			return nil, false, lerr
		}
		if existing.State() != domain.StatePending {
			if err := s.state.done(ctx, req.ReviewID); err != nil {
				return nil, false, err
			}
		}
		return s.resubmitted(existing, req, pl.Digest)
	}
	if err != nil {
		return nil, false, err
	}
	if err := s.state.claimPayload(ctx, req.ReviewID, pl, ev.Deadline, now); err != nil {
		return nil, false, err
	}
	s.metrics.submitted.WithLabelValues(req.ContentClass).Inc()
	s.log.InfoContext(ctx, "review submitted", "review_id", req.ReviewID, "content_class", req.ContentClass,
		"payload_bytes", len(req.Content), "remaining_budget_ms", class.Budget.Milliseconds())
	if err := s.publish(req.ReviewID); err != nil {
		// The review is stored and pending: the next start resumes it and
		// the sweeper bounds how long it can wait.
		s.log.ErrorContext(ctx, "publish review work", "review_id", req.ReviewID, "error", err.Error())
	}
	s.outstanding.created()
	return rv, true, nil
}

// resubmitted answers a submit of a review that exists: the same review
// (class, content type and content) again is not an error.
func (s *Service) resubmitted(existing *ledger.Review, req SubmitRequest, digest string) (*ledger.Review, bool, error) {
	if !existing.SameSubmission(req.ContentClass, req.ContentType, digest) {
		return nil, false, fmt.Errorf("review %q: %w", req.ReviewID, domain.ErrReviewExists)
	}
	return existing, false, nil
}

func (s *Service) publish(reviewID string) error {
	s.pubMu.RLock()
	defer s.pubMu.RUnlock()
	if s.pubClosed {
		return fmt.Errorf("publish %q: %w", reviewID, ErrShutdown)
	}
	msg := message.NewMessage(watermill.NewUUID(), []byte(reviewID))
	if err := s.publisher.Publish(s.cfg.Topic, msg); err != nil {
		return fmt.Errorf("publish %q: %w", reviewID, err)
	}
	return nil
}
