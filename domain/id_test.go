package domain_test

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/reviewledger/reviewledger/domain"
)

// reviewIDSpec is the contract's rule for review IDs (docs/contracts.md
// §2), written independently of the validator.
var reviewIDSpec = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

func TestValidateReviewID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		id   string
		ok   bool
	}{
		{"one letter", "a", true},
		{"one digit", "7", true},
		{"every allowed punctuation", "a.b_c:d-e", true},
		{"only punctuation", ".-_:", true},
		{"upper and lower case", "ReviewABCxyz", true},
		{"uuid", "0b7e4a8e-3c51-4a0c-9d67-6f1f3c0b9a11", true},
		{"urn-like", "caption:2026-03-01:42", true},
		{"128 characters", strings.Repeat("x", 128), true},

		{"empty", "", false},
		{"129 characters", strings.Repeat("x", 129), false},
		{"space", "rev 1", false},
		{"leading space", " rev", false},
		{"slash", "a/b", false},
		{"path traversal", "../etc", false},
		{"backslash", `a\b`, false},
		{"percent-encoding", "a%2Fb", false},
		{"query", "a?b", false},
		{"fragment", "a#b", false},
		{"plus", "a+b", false},
		{"at sign", "a@b", false},
		{"comma", "a,b", false},
		{"quote", `a"b`, false},
		{"tab", "a\tb", false},
		{"newline", "a\nb", false},
		{"NUL byte", "a\x00b", false},
		{"non-ASCII letter", "révision", false},
		{"emoji", "rev-😀", false},
		{"invalid UTF-8", "rev-\xff", false},
		{"128 characters and a slash", strings.Repeat("x", 127) + "/", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if reviewIDSpec.MatchString(tc.id) != tc.ok {
				t.Fatalf("case disagrees with the specification for %q", tc.id)
			}
			err := domain.ValidateReviewID(tc.id)
			if tc.ok {
				if err != nil {
					t.Fatalf("ValidateReviewID(%q) = %v, want nil", tc.id, err)
				}
				return
			}
			checkReviewIDError(t, tc.id, err)
		})
	}
}

func checkReviewIDError(t *testing.T, id string, err error) {
	t.Helper()
	var fe *domain.FieldError
	if !errors.As(err, &fe) || fe.Field != "review_id" || !errors.Is(err, domain.ErrInvalidReviewID) {
		t.Fatalf("ValidateReviewID(%q) = %v, want a review_id field error wrapping ErrInvalidReviewID", id, err)
	}
	if !strings.HasPrefix(err.Error(), "review_id: ") {
		t.Fatalf("message %q does not name the field", err)
	}
}

func TestStreamName(t *testing.T) {
	t.Parallel()
	if got := domain.StreamName("rev-1"); got != "review-rev-1" {
		t.Fatalf("StreamName = %q, want review-rev-1", got)
	}
}

// FuzzValidateReviewID checks the validator against the specification for
// any input: it never panics, accepts exactly the IDs the rule allows, and
// names the field when it refuses.
func FuzzValidateReviewID(f *testing.F) {
	for _, seed := range []string{"", "a", "rev-1", "a/b", strings.Repeat("z", 128), strings.Repeat("z", 129), "é", "\x00", "a.b_c:d-e"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, id string) {
		err := domain.ValidateReviewID(id)
		if want := reviewIDSpec.MatchString(id); (err == nil) != want {
			t.Fatalf("ValidateReviewID(%q) = %v, specification allows: %t", id, err, want)
		}
		if err != nil {
			checkReviewIDError(t, id, err)
		}
	})
}
