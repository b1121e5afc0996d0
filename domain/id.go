package domain

import (
	"fmt"
	"unicode/utf8"
)

// MaxReviewIDLen is the longest review ID accepted.
const MaxReviewIDLen = 128

// ValidateReviewID checks a caller-chosen review ID: 1 to 128 characters from
// [A-Za-z0-9._:-]. The error is a *FieldError on field "review_id" wrapping
// ErrInvalidReviewID.
func ValidateReviewID(id string) error {
	if id == "" {
		return &FieldError{Field: "review_id", Reason: "must not be empty", Err: ErrInvalidReviewID}
	}
	if len(id) > MaxReviewIDLen {
		return &FieldError{Field: "review_id", Reason: fmt.Sprintf("longer than %d characters", MaxReviewIDLen), Err: ErrInvalidReviewID}
	}
	for i := 0; i < len(id); i++ {
		if !idByte(id[i]) {
			r, _ := utf8.DecodeRuneInString(id[i:])
			return &FieldError{Field: "review_id", Reason: fmt.Sprintf("character %q at byte offset %d is not one of A-Z a-z 0-9 . _ : -", r, i), Err: ErrInvalidReviewID}
		}
	}
	return nil
}

func idByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	case c == '.', c == '_', c == ':', c == '-':
		return true
	}
	return false
}

// StreamName is the ledger stream holding a review's events.
func StreamName(reviewID string) string { return "review-" + reviewID }
