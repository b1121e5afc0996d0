package domain

import "time"

// StartAttempt returns the event that opens the next attempt, appended
// before the provider is called. Its timeout is min(attempt_timeout, time
// remaining).
//
// Errors: ErrNotPending, ErrAttemptInFlight, ErrAttemptsExhausted (every
// attempt the round allows was made), ErrBudgetExhausted (the deadline has passed).
func (r *Review) StartAttempt(now time.Time) (AttemptStarted, error) {
	switch {
	case !r.exists:
		return AttemptStarted{}, ErrReviewNotFound
	case r.state != StatePending:
		return AttemptStarted{}, ErrNotPending
	case r.inFlight != 0:
		return AttemptStarted{}, ErrAttemptInFlight
	case r.RoundAttempts() >= r.policy.MaxAttempts:
		return AttemptStarted{}, ErrAttemptsExhausted
	}
	// The ledger records the timeout in whole milliseconds; an attempt with
	// less than one left could never be answered in time.
	timeout := AttemptTimeout(r.policy.AttemptTimeout, now, r.deadline).Truncate(time.Millisecond)
	if timeout <= 0 {
		return AttemptStarted{}, ErrBudgetExhausted
	}
	return AttemptStarted{
		ReviewID:          r.id,
		Attempt:           r.attempts + 1,
		AttemptTimeoutMS:  timeout.Milliseconds(),
		RemainingBudgetMS: r.deadline.Sub(now).Milliseconds(),
		StartedAt:         now.UTC(),
	}, nil
}

// AttemptFailure describes an attempt that produced no usable finding.
type AttemptFailure struct {
	Attempt        int
	Classification Classification
	Detail         string        // status code or error class; never content
	RetryAfter     time.Duration // the provider's Retry-After, if any
}

// Failure is how an attempt ended without a finding, as its
// AttemptTimedOut records it.
type Failure struct {
	Attempt int
	// Provider is the provider the attempt was sent to.
	Provider       string
	Classification Classification
	Detail         string
	At             time.Time
	RetryAfter     time.Duration
}

// TimeOutAttempt returns the event closing the in-flight attempt without a
// finding. A timeout is a missing decision: the review stays pending.
//
// Errors: ErrNotPending, ErrAttemptNotInFlight.
func (r *Review) TimeOutAttempt(f AttemptFailure, now time.Time) (AttemptTimedOut, error) {
	switch {
	case !r.exists:
		return AttemptTimedOut{}, ErrReviewNotFound
	case r.state != StatePending:
		return AttemptTimedOut{}, ErrNotPending
	case r.inFlight == 0 || f.Attempt != r.inFlight:
		return AttemptTimedOut{}, ErrAttemptNotInFlight
	}
	return AttemptTimedOut{
		ReviewID:       r.id,
		Attempt:        f.Attempt,
		Classification: f.Classification,
		ElapsedMS:      now.Sub(r.inFlightStarted).Milliseconds(),
		Detail:         f.Detail,
		RetryAfterMS:   f.RetryAfter.Milliseconds(),
		At:             now.UTC(),
	}, nil
}

// Remaining is the time left until the review's deadline.
func (r *Review) Remaining(now time.Time) time.Duration { return r.deadline.Sub(now) }
