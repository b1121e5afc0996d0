package domain_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/domain"
)

func TestRecordConflictChangesNothing(t *testing.T) {
	t.Parallel()
	s := newStory(t, automated()).start(0).timeOut(1, 10*time.Second).start(11 * time.Second)
	version := s.review.Version()

	// The provider answers attempt 1 after it timed out.
	_, err := s.review.RecordFinding(finding(1, domain.DecisionAccepted), domain.SourceCallback, at(12*time.Second))
	reason, ok := domain.ConflictReasonOf(err)
	if !ok || reason != domain.ConflictAttemptNotInFlight {
		t.Fatalf("ConflictReasonOf(%v) = %q, %v; want attempt_not_in_flight", err, reason, ok)
	}
	e, err := s.review.RecordConflict(domain.Conflict{Attempt: 1, Source: domain.SourceCallback, Reason: reason, State: domain.DecisionAccepted}, at(12*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	want := domain.ConflictingCompletionRecorded{
		ReviewID: testID, ContentClass: testClass, Attempt: 1, Source: domain.SourceCallback, Reason: domain.ConflictAttemptNotInFlight,
		State: domain.DecisionAccepted, ReviewState: domain.StatePending, ReviewVersion: version, At: at(12 * time.Second),
	}
	if e != want {
		t.Fatalf("event = %#v\nwant    %#v", e, want)
	}
	if s.review.Version() != version || s.review.State() != domain.StatePending {
		t.Fatalf("review moved to %s at %d", s.review.State(), s.review.Version())
	}
	// It is never part of the review's own history.
	if err := s.review.Apply(version+1, e); !errors.Is(err, domain.ErrCorruptHistory) {
		t.Fatalf("Apply in the review stream: %v, want ErrCorruptHistory", err)
	}
}

func TestConflictReasonOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want domain.ConflictReason
		ok   bool
	}{
		{fmt.Errorf("late: %w", domain.ErrAttemptNotInFlight), domain.ConflictAttemptNotInFlight, true},
		{domain.ErrNotPending, domain.ConflictReviewMovedOn, true},
		{domain.ErrInvalidFinding, "", false},
		{nil, "", false},
	} {
		if got, ok := domain.ConflictReasonOf(tc.err); got != tc.want || ok != tc.ok {
			t.Errorf("ConflictReasonOf(%v) = %q, %v; want %q, %v", tc.err, got, ok, tc.want, tc.ok)
		}
	}
	if _, err := new(domain.Review).RecordConflict(domain.Conflict{}, t0); !errors.Is(err, domain.ErrReviewNotFound) {
		t.Errorf("RecordConflict on no review: %v, want ErrReviewNotFound", err)
	}
}

// TestSweptAttemptTimesOutThenEscalates checks the sequence the deadline
// sweeper appends for a review whose attempt is still open past its
// deadline: the attempt's outcome, then the escalation, both computed on
// the same loaded review.
func TestSweptAttemptTimesOutThenEscalates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		policy domain.ClassPolicy
		want   domain.State
	}{
		{"manual_review", automated(), domain.StateManualReview},
		{"fail closed", failClosed(), domain.StateRejected},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStory(t, tc.policy).start(0).timeOut(1, 10*time.Second).start(25 * time.Second)
			now := at(31 * time.Second)
			timedOut, err := s.review.TimeOutAttempt(domain.AttemptFailure{Attempt: 2, Classification: domain.ClassDeadlineExceeded}, now)
			if err != nil {
				t.Fatal(err)
			}
			esc, err := s.review.Escalate(domain.ReasonDeadlinePassed, "", now)
			if err != nil {
				t.Fatal(err)
			}
			s.apply(timedOut, esc)
			if n, _, _, _ := s.review.InFlight(); n != 0 || s.review.State() != tc.want || esc.Attempts != 2 || timedOut.ElapsedMS != 6000 {
				t.Fatalf("in flight %d, state %s, escalated after %d attempts, elapsed %d ms", n, s.review.State(), esc.Attempts, timedOut.ElapsedMS)
			}
		})
	}
}
