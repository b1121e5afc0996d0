package domain

import (
	"fmt"
	"slices"
	"time"
)

// Finding is a provider's structured answer for one attempt.
type Finding struct {
	ReviewID string
	Attempt  int
	State    Decision
	Reasons  []string
}

// Source of a finding, recorded in FindingReceived.
const (
	SourceResponse = "response"
	SourceCallback = "callback"
)

// CheckComplete reports whether f is a complete structured finding for the
// review: matching review ID and a state of accepted or rejected. Nothing is
// inferred from anything less; the error wraps ErrInvalidFinding.
func (f Finding) CheckComplete(reviewID string) error {
	if f.ReviewID != reviewID {
		return fmt.Errorf("finding names review %q, not %q: %w", f.ReviewID, reviewID, ErrInvalidFinding)
	}
	if !f.State.Valid() {
		return fmt.Errorf("finding state %q is neither accepted nor rejected: %w", f.State, ErrInvalidFinding)
	}
	return nil
}

// Equal reports whether f and g are the same finding: the same review,
// attempt and state, and the same reasons in the same order (no reasons
// and an empty list alike). Where a finding came from (a response or a
// callback, which webhook) is not part of it.
func (f Finding) Equal(g Finding) bool {
	return f.ReviewID == g.ReviewID && f.Attempt == g.Attempt && f.State == g.State && slices.Equal(f.Reasons, g.Reasons)
}

// HeldByGate reports whether an automated finding of state, on a class whose
// policy sets human_gate, is held for a moderator instead of deciding the
// review: an accept on a human-gated class. Such a FindingReceived is always
// followed by Escalated (reason human_gate) to manual_review. Read models
// that see only the finding ask this rather than restating the rule.
func HeldByGate(humanGate bool, state Decision) bool {
	return humanGate && state == DecisionAccepted
}

// RecordFinding returns the events that record a complete finding for the
// attempt in flight: FindingReceived, followed by Escalated to manual_review
// when the class has a human gate and the finding accepts.
//
// The finding must arrive within its attempt's timeout; a late one is
// ErrAttemptNotInFlight and changes nothing.
//
// Errors: ErrInvalidFinding, ErrNotPending, ErrAttemptNotInFlight.
func (r *Review) RecordFinding(f Finding, source string, now time.Time) ([]Event, error) {
	if !r.exists {
		return nil, ErrReviewNotFound
	}
	if err := f.CheckComplete(r.id); err != nil {
		return nil, err
	}
	switch {
	case r.state != StatePending:
		return nil, ErrNotPending
	case r.inFlight == 0 || f.Attempt != r.inFlight:
		return nil, ErrAttemptNotInFlight
	case now.After(r.inFlightStarted.Add(r.inFlightTimeout)):
		return nil, fmt.Errorf("finding for attempt %d arrived after its timeout: %w", f.Attempt, ErrAttemptNotInFlight)
	}
	now = now.UTC()
	reasons := slices.Clone(f.Reasons)
	if reasons == nil {
		reasons = []string{}
	}
	events := []Event{FindingReceived{
		ReviewID:   r.id,
		Attempt:    f.Attempt,
		State:      f.State,
		Reasons:    reasons,
		Source:     source,
		ElapsedMS:  now.Sub(r.inFlightStarted).Milliseconds(),
		ReceivedAt: now,
	}}
	if HeldByGate(r.policy.HumanGate, f.State) {
		events = append(events, Escalated{
			ReviewID: r.id,
			Reason:   ReasonHumanGate,
			State:    StateManualReview,
			Attempts: r.attempts,
			Detail:   "automated accept held for a moderator",
			At:       now,
		})
	}
	return events, nil
}
