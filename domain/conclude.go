package domain

import (
	"errors"
	"time"
)

// Answer is what one provider call came to.
type Answer struct {
	// Finding is the provider's finding when it answered with one, not yet
	// checked for completeness; nil when it did not.
	Finding *Finding
	// Failure says how the call failed when Finding is nil (its Attempt is
	// ignored: Conclude closes the attempt it is given).
	Failure AttemptFailure
}

// Conclude returns the events recording how attempt ended with the given
// answer, received at now:
//
//   - a complete finding within the attempt's timeout: FindingReceived,
//     followed by Escalated{human_gate} on a gated class that accepts;
//   - an incomplete finding (wrong review ID, no valid state):
//     AttemptTimedOut{invalid_finding}: never a decision;
//   - a complete finding the review cannot take (after the attempt's
//     timeout, or the review moved on): the refusal as a Conflict, and
//     AttemptTimedOut{deadline_exceeded} when the attempt is still in
//     flight;
//   - a failure: AttemptTimedOut with its classification.
//
// What follows an AttemptTimedOut (a retry, a wait, an escalation) is for
// Next to say. Errors: those of TimeOutAttempt, when the attempt is not in
// flight and there is no conflict to report.
func (r *Review) Conclude(attempt int, a Answer, now time.Time) (events []Event, refused *Conflict, err error) {
	failure := a.Failure
	if a.Finding != nil {
		f := *a.Finding
		f.Attempt = attempt
		events, err := r.RecordFinding(f, SourceResponse, now)
		reason, late := ConflictReasonOf(err)
		switch {
		case err == nil:
			return events, nil, nil
		case errors.Is(err, ErrInvalidFinding):
			failure = AttemptFailure{Classification: ClassInvalidFinding, Detail: joinDetail(failure.Detail, err.Error())}
		case late:
			refused = &Conflict{Attempt: attempt, Source: SourceResponse, Reason: reason, State: f.State, Detail: "finding after the attempt timeout"}
			if r.state != StatePending || r.inFlight != attempt {
				return nil, refused, nil
			}
			failure = AttemptFailure{Classification: ClassDeadlineExceeded, Detail: "finding arrived after the attempt timeout"}
		default:
			return nil, nil, err
		}
	}
	failure.Attempt = attempt
	ev, err := r.TimeOutAttempt(failure, now)
	if err != nil {
		return nil, refused, err
	}
	return []Event{ev}, refused, nil
}

func joinDetail(a, b string) string {
	if a == "" {
		return b
	}
	return a + ": " + b
}
