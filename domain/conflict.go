package domain

import (
	"errors"
	"time"
)

// TypeConflictingCompletionRecorded names ConflictingCompletionRecorded.
const TypeConflictingCompletionRecorded = "ConflictingCompletionRecorded"

// ConflictReason says why a completion could not be committed.
type ConflictReason string

const (
	// ConflictAttemptNotInFlight: the finding's attempt already ended (it
	// timed out, or a newer attempt started) while the review is pending.
	ConflictAttemptNotInFlight ConflictReason = "attempt_not_in_flight"
	// ConflictReviewMovedOn: the review is no longer pending (decided or
	// escalated).
	ConflictReviewMovedOn ConflictReason = "review_moved_on"
	// ConflictWrongExpectedVersion: the finding was valid when checked, but
	// its append failed the expected-revision check because the review moved
	// meanwhile.
	ConflictWrongExpectedVersion ConflictReason = "wrong_expected_version"
	// ConflictDuplicateDelivery: a callback delivery (webhook-id) seen
	// before, refused again.
	ConflictDuplicateDelivery ConflictReason = "duplicate_delivery"
)

// ConflictingCompletionRecorded records a completion that was refused and
// changed nothing: a late or duplicate finding (guarantee 4 in
// docs/architecture.md). It is never part of a review's own stream, whose
// revision a refused completion must not move; the ledger keeps it in the
// review's conflict stream (ConflictStreamName). It holds no content.
type ConflictingCompletionRecorded struct {
	ReviewID     string `json:"review_id"`
	ContentClass string `json:"content_class"`
	// Attempt is the attempt the completion named; 0 when unknown (a
	// callback delivery refused again by its webhook-id).
	Attempt int            `json:"attempt"`
	Source  string         `json:"source"` // SourceResponse or SourceCallback
	Reason  ConflictReason `json:"reason"`
	// State is the finding's state, when it had one.
	State Decision `json:"state,omitempty"`
	// ReviewState and ReviewVersion are where the review stood when the
	// completion was refused.
	ReviewState   State     `json:"review_state"`
	ReviewVersion uint64    `json:"review_version"`
	Detail        string    `json:"detail,omitempty"` // short diagnostic; never content
	At            time.Time `json:"at"`
}

func (ConflictingCompletionRecorded) EventType() string { return TypeConflictingCompletionRecorded }

// ConflictStreamName is the ledger stream holding a review's conflicting
// completions. It does not start with StreamName's prefix, so listing
// review streams never finds it.
func ConflictStreamName(reviewID string) string { return "conflicts-" + reviewID }

// Conflict describes a refused completion.
type Conflict struct {
	Attempt int
	Source  string
	Reason  ConflictReason
	State   Decision // the finding's state; empty when it had none
	Detail  string
}

// RecordConflict returns the event recording a refused completion against
// the review as it stands. It changes nothing in the review: the event
// belongs in the conflict stream, and Apply refuses it.
func (r *Review) RecordConflict(c Conflict, now time.Time) (ConflictingCompletionRecorded, error) {
	if !r.exists {
		return ConflictingCompletionRecorded{}, ErrReviewNotFound
	}
	return ConflictingCompletionRecorded{
		ReviewID:      r.id,
		ContentClass:  r.class,
		Attempt:       c.Attempt,
		Source:        c.Source,
		Reason:        c.Reason,
		State:         c.State,
		ReviewState:   r.state,
		ReviewVersion: r.version,
		Detail:        c.Detail,
		At:            now.UTC(),
	}, nil
}

// ConflictReasonOf classifies the error RecordFinding returned for a
// complete finding: ErrNotPending is review_moved_on, ErrAttemptNotInFlight
// attempt_not_in_flight. It reports false for any other error.
func ConflictReasonOf(err error) (ConflictReason, bool) {
	switch {
	case errors.Is(err, ErrNotPending):
		return ConflictReviewMovedOn, true
	case errors.Is(err, ErrAttemptNotInFlight):
		return ConflictAttemptNotInFlight, true
	}
	return "", false
}
