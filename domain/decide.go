package domain

import (
	"slices"
	"time"
)

// ManualDecision is a moderator's decision on a manual_review item.
type ManualDecision struct {
	Moderator string
	State     Decision
	Note      string
	// ExpectedVersion is the review version the moderator saw.
	ExpectedVersion uint64
}

// DecideManually returns the events recording a moderator's decision. When
// the class needs more than one approval, votes are recorded as
// ManualApprovalRecorded until enough distinct moderators agree on the same
// state; then ManualDecisionRecorded decides the review.
//
// ExpectedVersion may be older than the review's version when only claims
// and holds were appended since (Current). On a class with claims:
// required the moderator must hold a live claim at now.
//
// Errors: ErrReviewNotFound, ErrNotInManualReview, ErrVersionMismatch,
// ErrInvalidDecision (as a *FieldError naming "state" or "moderator"),
// ErrAlreadyApproved, *ClaimedError, ErrClaimRequired.
func (r *Review) DecideManually(d ManualDecision, now time.Time) ([]Event, error) {
	switch {
	case !r.exists:
		return nil, ErrReviewNotFound
	case !d.State.Valid():
		return nil, &FieldError{Field: "state", Reason: `must be "accepted" or "rejected"`, Err: ErrInvalidDecision}
	case d.Moderator == "":
		return nil, &FieldError{Field: "moderator", Reason: "must not be empty", Err: ErrInvalidDecision}
	case r.state != StateManualReview:
		return nil, ErrNotInManualReview
	case !r.Current(d.ExpectedVersion):
		return nil, ErrVersionMismatch
	case r.approved(d.Moderator):
		return nil, ErrAlreadyApproved
	}
	if err := r.mayAct(d.Moderator, now); err != nil {
		return nil, err
	}
	now = now.UTC()
	agreed := r.approvals[d.State]
	if len(agreed)+1 < r.policy.RequiredApprovals() {
		return []Event{ManualApprovalRecorded{
			ReviewID: r.id, State: d.State, Moderator: d.Moderator, Note: d.Note, At: now,
		}}, nil
	}
	var approvers []string
	if r.policy.RequiredApprovals() > 1 {
		approvers = append(slices.Clone(agreed), d.Moderator)
	}
	return []Event{ManualDecisionRecorded{
		ReviewID: r.id, State: d.State, Moderator: d.Moderator, Note: d.Note, Approvers: approvers, At: now,
	}}, nil
}
