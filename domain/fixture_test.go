package domain_test

import (
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/domain"
)

// t0 is the submission time of every review in these tests. Time is always
// passed in, so a fixed instant makes every case deterministic.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// at returns the instant d after submission.
func at(d time.Duration) time.Time { return t0.Add(d) }

const (
	testID    = "rev-1"
	testClass = "caption_suggestion"
)

// automated is a class decided by the provider alone: 30 s budget, 10 s per
// attempt, three attempts, exhausted work to manual_review.
func automated() domain.ClassPolicy {
	return domain.ClassPolicy{
		Budget:         30 * time.Second,
		AttemptTimeout: 10 * time.Second,
		MaxAttempts:    3,
		Backoff:        domain.Backoff{Initial: 100 * time.Millisecond, Max: 2 * time.Second, Jitter: 75 * time.Millisecond},
		OnExhaustion:   domain.ExhaustToManualReview,
		Priority:       1,
	}
}

// failClosed rejects exhausted work instead of queueing it.
func failClosed() domain.ClassPolicy {
	p := automated()
	p.OnExhaustion = domain.ExhaustToRejected
	return p
}

// gated holds every automated accept for a moderator.
func gated() domain.ClassPolicy {
	p := automated()
	p.HumanGate = true
	return p
}

// fourEyes needs two distinct moderators to agree on a manual decision.
func fourEyes() domain.ClassPolicy {
	p := automated()
	p.Approvals = 2
	return p
}

// story builds a review's history through the commands, failing the test
// when a step that should be legal is refused. Every event is applied at
// the next revision, as the ledger would store it.
type story struct {
	tb     testing.TB
	review *domain.Review
	events []domain.Event
}

func newStory(tb testing.TB, p domain.ClassPolicy) *story {
	tb.Helper()
	e, err := domain.Submit(domain.SubmitCommand{
		ReviewID:      testID,
		ContentClass:  testClass,
		ContentType:   "text/vtt",
		PayloadDigest: "sha256:00ff",
		PayloadBytes:  42,
		Policy:        p,
		SubmittedBy:   "platform",
		Now:           t0,
	})
	if err != nil {
		tb.Fatalf("Submit: %v", err)
	}
	s := &story{tb: tb, review: &domain.Review{}}
	s.apply(e)
	return s
}

func (s *story) apply(events ...domain.Event) {
	s.tb.Helper()
	for _, e := range events {
		if err := s.review.Apply(uint64(len(s.events)), e); err != nil {
			s.tb.Fatalf("Apply %s: %v", e.EventType(), err)
		}
		s.events = append(s.events, e)
	}
}

func (s *story) start(now time.Duration) *story {
	s.tb.Helper()
	e, err := s.review.StartAttempt(at(now))
	if err != nil {
		s.tb.Fatalf("StartAttempt at %s: %v", now, err)
	}
	s.apply(e)
	return s
}

func (s *story) timeOut(attempt int, now time.Duration) *story {
	s.tb.Helper()
	e, err := s.review.TimeOutAttempt(domain.AttemptFailure{Attempt: attempt, Classification: domain.ClassDeadlineExceeded}, at(now))
	if err != nil {
		s.tb.Fatalf("TimeOutAttempt %d at %s: %v", attempt, now, err)
	}
	s.apply(e)
	return s
}

func (s *story) find(attempt int, state domain.Decision, now time.Duration) *story {
	s.tb.Helper()
	events, err := s.review.RecordFinding(finding(attempt, state), domain.SourceResponse, at(now))
	if err != nil {
		s.tb.Fatalf("RecordFinding %d %s at %s: %v", attempt, state, now, err)
	}
	s.apply(events...)
	return s
}

func (s *story) escalate(reason domain.EscalationReason, now time.Duration) *story {
	s.tb.Helper()
	e, err := s.review.Escalate(reason, "", at(now))
	if err != nil {
		s.tb.Fatalf("Escalate %s at %s: %v", reason, now, err)
	}
	s.apply(e)
	return s
}

func (s *story) vote(moderator string, state domain.Decision, now time.Duration) *story {
	s.tb.Helper()
	events, err := s.review.DecideManually(vote(s.review, moderator, state), at(now))
	if err != nil {
		s.tb.Fatalf("DecideManually %s %s at %s: %v", moderator, state, now, err)
	}
	s.apply(events...)
	return s
}

// toManual is the usual way into the manual queue: one attempt timed out,
// then attempts exhausted.
func (s *story) toManual() *story {
	s.tb.Helper()
	return s.start(0).timeOut(1, 10*time.Second).escalate(domain.ReasonAttemptsExhausted, 10*time.Second)
}

func finding(attempt int, state domain.Decision) domain.Finding {
	return domain.Finding{ReviewID: testID, Attempt: attempt, State: state, Reasons: []string{"policy:ok"}}
}

// vote is a moderator's decision against the version the moderator sees.
func vote(r *domain.Review, moderator string, state domain.Decision) domain.ManualDecision {
	return domain.ManualDecision{Moderator: moderator, State: state, Note: "checked by " + moderator, ExpectedVersion: r.Version()}
}

// types lists the type names of events.
func types(events []domain.Event) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = e.EventType()
	}
	return out
}

// one adapts a single-event command to the []Event shape of the table.
func one[E domain.Event](e E, err error) ([]domain.Event, error) {
	if err != nil {
		return nil, err
	}
	return []domain.Event{e}, nil
}
