package domain

import "time"

// Escalate returns the event that ends the automated path of a pending
// review. Exhaustion reasons go where the class's on_exhaustion says
// (manual_review, or rejected for fail-closed classes); a human gate or a
// cancellation always goes to manual_review.
//
// Errors: ErrNotPending.
func (r *Review) Escalate(reason EscalationReason, detail string, now time.Time) (Escalated, error) {
	switch {
	case !r.exists:
		return Escalated{}, ErrReviewNotFound
	case r.state != StatePending:
		return Escalated{}, ErrNotPending
	}
	target := StateManualReview
	if r.failsClosed(reason) {
		target = StateRejected
	}
	return Escalated{
		ReviewID: r.id,
		Reason:   reason,
		State:    target,
		Attempts: r.attempts,
		Detail:   detail,
		At:       now.UTC(),
	}, nil
}
