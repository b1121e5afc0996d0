package domain

import (
	"errors"
	"fmt"
)

// Sentinel errors returned by the commands of this package. Callers match
// them with errors.Is; the HTTP layer maps them to status codes in one table.
var (
	ErrInvalidReviewID    = errors.New("invalid review id")
	ErrReviewNotFound     = errors.New("review not found")
	ErrUnknownClass       = errors.New("unknown content class")
	ErrReviewExists       = errors.New("review exists with other content or class")
	ErrNotPending         = errors.New("review is not pending")
	ErrNotInManualReview  = errors.New("review is not in manual_review")
	ErrAttemptInFlight    = errors.New("an attempt is already in flight")
	ErrAttemptNotInFlight = errors.New("attempt is not the one in flight")
	ErrAttemptsExhausted  = errors.New("attempts exhausted")
	ErrBudgetExhausted    = errors.New("review budget exhausted")
	ErrInvalidFinding     = errors.New("invalid finding")
	ErrVersionMismatch    = errors.New("review version moved")
	ErrAlreadyApproved    = errors.New("moderator already approved this review")
	ErrInvalidDecision    = errors.New("invalid decision")
	ErrInvalidPolicy      = errors.New("invalid policy")
	ErrCorruptHistory     = errors.New("event history is not a valid review")
)

// FieldError names the input field at fault. It wraps a sentinel so
// errors.Is keeps working.
type FieldError struct {
	Field  string
	Reason string
	Err    error
}

func (e *FieldError) Error() string { return fmt.Sprintf("%s: %s", e.Field, e.Reason) }
func (e *FieldError) Unwrap() error { return e.Err }
