package domain

import "time"

// SubmitCommand opens a review.
type SubmitCommand struct {
	ReviewID      string
	ContentClass  string
	ContentType   string
	PayloadDigest string // "sha256:<hex>" of the content; the content itself stays out of the ledger
	PayloadBytes  int
	Policy        ClassPolicy // the class's policy, validated
	SubmittedBy   string
	Now           time.Time
}

// Submit returns the first event of a new review.
func Submit(cmd SubmitCommand) (Submitted, error) {
	if err := ValidateReviewID(cmd.ReviewID); err != nil {
		return Submitted{}, err
	}
	if cmd.ContentClass == "" {
		return Submitted{}, &FieldError{Field: "content_class", Reason: "must not be empty", Err: ErrUnknownClass}
	}
	if err := cmd.Policy.Validate(cmd.ContentClass); err != nil {
		return Submitted{}, err
	}
	now := cmd.Now.UTC()
	return Submitted{
		ReviewID:      cmd.ReviewID,
		ContentClass:  cmd.ContentClass,
		ContentType:   cmd.ContentType,
		PayloadDigest: cmd.PayloadDigest,
		PayloadBytes:  cmd.PayloadBytes,
		Policy:        cmd.Policy.Snapshot(),
		SubmittedAt:   now,
		Deadline:      now.Add(cmd.Policy.Budget),
		SubmittedBy:   cmd.SubmittedBy,
	}, nil
}

// SameSubmission reports whether a repeated submit names the same review:
// same class, content type and content digest. A repeat that differs is a
// conflict (ErrReviewExists), never a second review.
func (r *Review) SameSubmission(class, contentType, payloadDigest string) bool {
	return r.exists && r.class == class && r.contentType == contentType && r.payloadDigest == payloadDigest
}
