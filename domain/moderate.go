package domain

import (
	"errors"
	"fmt"
	"time"
)

// Errors of the moderation commands.
var (
	// ErrClaimedByOther: another moderator holds a live claim. The error
	// is a *ClaimedError naming the holder.
	ErrClaimedByOther = errors.New("claimed by another moderator")
	// ErrClaimRequired: the class has claims: required and the caller
	// holds no live claim (nobody does).
	ErrClaimRequired = errors.New("a live claim is required")
	// ErrNotClaimed: releasing a claim nobody holds.
	ErrNotClaimed = errors.New("review is not claimed")
	// ErrAlreadyHeld and ErrNotHeld: hold of a held review, unhold of one
	// not on hold.
	ErrAlreadyHeld = errors.New("review is already on hold")
	ErrNotHeld     = errors.New("review is not on hold")
)

// ClaimedError reports the live claim that refused an action.
type ClaimedError struct {
	ReviewID  string
	Moderator string
	ExpiresAt time.Time
}

func (e *ClaimedError) Error() string {
	return fmt.Sprintf("review %s: claimed by %s until %s", e.ReviewID, e.Moderator, e.ExpiresAt.UTC().Format(time.RFC3339))
}

// Is makes errors.Is(err, ErrClaimedByOther) true.
func (e *ClaimedError) Is(target error) bool { return target == ErrClaimedByOther }

// SystemActor is the actor of what the service records by itself (an
// expired claim's release).
const SystemActor = "system"

// inQueue checks that the review waits for a moderator.
func (r *Review) inQueue() error {
	switch {
	case !r.exists:
		return ErrReviewNotFound
	case r.state != StateManualReview:
		return ErrNotInManualReview
	}
	return nil
}

// claimedByOther returns a *ClaimedError when someone other than who holds
// a live claim at now.
func (r *Review) claimedByOther(who string, now time.Time) error {
	if r.claim.Live(now) && r.claim.Moderator != who {
		return &ClaimedError{ReviewID: r.id, Moderator: r.claim.Moderator, ExpiresAt: r.claim.ExpiresAt}
	}
	return nil
}

// mayAct checks what a class's claims key asks of a moderator deciding or
// holding the review at now: nothing on claims: optional (as before claims
// could be required); on claims: required, the moderator's own live claim.
func (r *Review) mayAct(who string, now time.Time) error {
	if !r.policy.ClaimsRequired() {
		return nil
	}
	if err := r.claimedByOther(who, now); err != nil {
		return err
	}
	if !r.claim.Live(now) {
		return fmt.Errorf("review %s: class %s has claims: required: %w", r.id, r.class, ErrClaimRequired)
	}
	return nil
}

// RequeueCommand sends a review in manual_review back to the automated
// path.
type RequeueCommand struct {
	By   string
	Note string
	// ExpectedVersion is the review version the moderator saw.
	ExpectedVersion uint64
}

// Requeue returns the Requeued event of a new automated round with a fresh
// budget: its deadline is now plus the class's budget.
//
// Errors: ErrReviewNotFound, ErrNotInManualReview, ErrVersionMismatch,
// *ClaimedError (another moderator's live claim), ErrInvalidDecision (as a
// *FieldError naming "by").
func (r *Review) Requeue(c RequeueCommand, now time.Time) (Requeued, error) {
	if err := r.inQueue(); err != nil {
		return Requeued{}, err
	}
	switch {
	case c.By == "":
		return Requeued{}, &FieldError{Field: "by", Reason: "must not be empty", Err: ErrInvalidDecision}
	case !r.Current(c.ExpectedVersion):
		return Requeued{}, ErrVersionMismatch
	}
	if err := r.claimedByOther(c.By, now); err != nil {
		return Requeued{}, err
	}
	now = now.UTC()
	return Requeued{
		ReviewID: r.id, By: c.By, Note: c.Note, Round: r.round + 1,
		Deadline: now.Add(r.policy.Budget), BudgetMS: r.policy.Budget.Milliseconds(), At: now,
	}, nil
}

// Claim returns the event giving moderator a lease until now+lease; the
// holder of a live claim renews it.
//
// Errors: ErrReviewNotFound, ErrNotInManualReview, *ClaimedError,
// ErrInvalidDecision (a *FieldError naming "moderator" or "lease").
func (r *Review) Claim(moderator string, lease time.Duration, now time.Time) (Claimed, error) {
	if err := r.inQueue(); err != nil {
		return Claimed{}, err
	}
	switch {
	case moderator == "":
		return Claimed{}, &FieldError{Field: "moderator", Reason: "must not be empty", Err: ErrInvalidDecision}
	case lease < time.Millisecond:
		return Claimed{}, &FieldError{Field: "lease", Reason: fmt.Sprintf("must be at least 1ms, got %s", lease), Err: ErrInvalidDecision}
	}
	if err := r.claimedByOther(moderator, now); err != nil {
		return Claimed{}, err
	}
	now = now.UTC()
	return Claimed{ReviewID: r.id, Moderator: moderator, ClaimedAt: now, ExpiresAt: now.Add(lease)}, nil
}

// ReleaseClaim returns the event ending the live claim: by's own, or
// anyone's when admin is set.
//
// Errors: ErrReviewNotFound, ErrNotInManualReview, ErrNotClaimed (no live
// claim), *ClaimedError (another moderator's claim and not admin).
func (r *Review) ReleaseClaim(by string, admin bool, now time.Time) (ClaimReleased, error) {
	if err := r.inQueue(); err != nil {
		return ClaimReleased{}, err
	}
	if !r.claim.Live(now) {
		return ClaimReleased{}, fmt.Errorf("review %s: %w", r.id, ErrNotClaimed)
	}
	if !admin {
		if err := r.claimedByOther(by, now); err != nil {
			return ClaimReleased{}, err
		}
	}
	return ClaimReleased{ReviewID: r.id, Moderator: r.claim.Moderator, By: by, Reason: ReleaseReleased, At: now.UTC()}, nil
}

// ExpireClaim returns the event recording that the review's claim ran
// out, and false when there is none that has expired at now.
func (r *Review) ExpireClaim(now time.Time) (ClaimReleased, bool) {
	if r.state != StateManualReview || r.claim == nil || r.claim.Live(now) {
		return ClaimReleased{}, false
	}
	return ClaimReleased{ReviewID: r.id, Moderator: r.claim.Moderator, By: SystemActor, Reason: ReleaseExpired, At: now.UTC()}, true
}

// HoldCommand puts a review on hold.
type HoldCommand struct {
	By   string
	Note string
	// ExpectedVersion, when set, is the review version the moderator saw.
	ExpectedVersion *uint64
}

// PutOnHold returns the Held event.
//
// Errors: ErrReviewNotFound, ErrNotInManualReview, ErrVersionMismatch,
// ErrAlreadyHeld, *ClaimedError, ErrClaimRequired, ErrInvalidDecision (a
// *FieldError naming "note" or "by").
func (r *Review) PutOnHold(c HoldCommand, now time.Time) (Held, error) {
	if err := r.inQueue(); err != nil {
		return Held{}, err
	}
	switch {
	case c.By == "":
		return Held{}, &FieldError{Field: "by", Reason: "must not be empty", Err: ErrInvalidDecision}
	case c.Note == "":
		return Held{}, &FieldError{Field: "note", Reason: "is required: why the review waits", Err: ErrInvalidDecision}
	case c.ExpectedVersion != nil && !r.Current(*c.ExpectedVersion):
		return Held{}, ErrVersionMismatch
	case r.hold != nil:
		return Held{}, fmt.Errorf("review %s: held by %s: %w", r.id, r.hold.By, ErrAlreadyHeld)
	}
	if err := r.holdAllowed(c.By, now); err != nil {
		return Held{}, err
	}
	return Held{ReviewID: r.id, By: c.By, Note: c.Note, At: now.UTC()}, nil
}

// TakeOffHold returns the Unheld event.
//
// Errors: ErrReviewNotFound, ErrNotInManualReview, ErrNotHeld,
// *ClaimedError, ErrClaimRequired.
func (r *Review) TakeOffHold(by string, now time.Time) (Unheld, error) {
	if err := r.inQueue(); err != nil {
		return Unheld{}, err
	}
	if r.hold == nil {
		return Unheld{}, fmt.Errorf("review %s: %w", r.id, ErrNotHeld)
	}
	if err := r.holdAllowed(by, now); err != nil {
		return Unheld{}, err
	}
	return Unheld{ReviewID: r.id, By: by, At: now.UTC()}, nil
}

// holdAllowed: another moderator's live claim refuses a hold on any class;
// claims: required asks for the caller's own.
func (r *Review) holdAllowed(by string, now time.Time) error {
	if err := r.claimedByOther(by, now); err != nil {
		return err
	}
	return r.mayAct(by, now)
}
