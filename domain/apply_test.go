package domain_test

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/domain"
)

// alien is an event this package does not know.
type alien struct{}

func (alien) EventType() string { return "Alien" }

// TestApplyRefusesImpossibleHistory checks that a history no sequence of
// commands could have written fails to load with ErrCorruptHistory, so a
// damaged or tampered stream never produces a plausible review.
func TestApplyRefusesImpossibleHistory(t *testing.T) {
	t.Parallel()
	var (
		sub = func(p domain.ClassPolicy) domain.Submitted {
			return domain.Submitted{ReviewID: testID, ContentClass: testClass, Policy: p.Snapshot(), SubmittedAt: t0, Deadline: at(p.Budget)}
		}
		start = func(n int) domain.AttemptStarted {
			return domain.AttemptStarted{ReviewID: testID, Attempt: n, AttemptTimeoutMS: 10000, RemainingBudgetMS: 30000, StartedAt: t0}
		}
		timedOut = func(n int) domain.AttemptTimedOut {
			return domain.AttemptTimedOut{ReviewID: testID, Attempt: n, Classification: domain.ClassDeadlineExceeded, At: t0}
		}
		found = func(n int, state domain.Decision) domain.FindingReceived {
			return domain.FindingReceived{ReviewID: testID, Attempt: n, State: state, Reasons: []string{}, ReceivedAt: t0}
		}
		escalated = func(reason domain.EscalationReason, state domain.State) domain.Escalated {
			return domain.Escalated{ReviewID: testID, Reason: reason, State: state, At: t0}
		}
		approval = func(moderator string, state domain.Decision) domain.ManualApprovalRecorded {
			return domain.ManualApprovalRecorded{ReviewID: testID, Moderator: moderator, State: state, At: t0}
		}
		decision = func(moderator string, state domain.Decision, approvers ...string) domain.ManualDecisionRecorded {
			return domain.ManualDecisionRecorded{ReviewID: testID, Moderator: moderator, State: state, Approvers: approvers, At: t0}
		}
		queued     = []domain.Event{sub(automated()), start(1), timedOut(1), escalated(domain.ReasonAttemptsExhausted, domain.StateManualReview)}
		fourQueued = []domain.Event{sub(fourEyes()), start(1), timedOut(1), escalated(domain.ReasonAttemptsExhausted, domain.StateManualReview)}
		then       = func(history []domain.Event, more ...domain.Event) []domain.Event { return slices.Concat(history, more) }
	)
	oneAttempt := automated()
	oneAttempt.MaxAttempts = 1
	gatedClosed := gated()
	gatedClosed.OnExhaustion = domain.ExhaustToRejected

	for _, tc := range []struct {
		name    string
		history []domain.Event
	}{
		{"history not opened by Submitted", []domain.Event{start(1)}},
		{"Submitted twice", []domain.Event{sub(automated()), sub(automated())}},
		{"unknown event", []domain.Event{sub(automated()), alien{}}},
		{"event of another review", []domain.Event{sub(automated()), domain.AttemptStarted{ReviewID: "rev-2", Attempt: 1, StartedAt: t0}}},
		{"finding of another review", []domain.Event{sub(automated()), start(1), domain.FindingReceived{ReviewID: "rev-2", Attempt: 1, State: domain.DecisionAccepted}}},

		{"attempt number skipped", []domain.Event{sub(automated()), start(2)}},
		{"attempt number repeated", []domain.Event{sub(automated()), start(1), timedOut(1), start(1)}},
		{"attempt while one is in flight", []domain.Event{sub(automated()), start(1), start(2)}},
		{"attempt past max_attempts", []domain.Event{sub(oneAttempt), start(1), timedOut(1), start(2)}},
		{"attempt after a decision", []domain.Event{sub(automated()), start(1), found(1, domain.DecisionAccepted), start(2)}},
		{"attempt in manual_review", then(queued, start(2))},

		{"timeout before any attempt", []domain.Event{sub(automated()), timedOut(1)}},
		{"timeout of another attempt", []domain.Event{sub(automated()), start(1), timedOut(2)}},
		{"timeout of an attempt twice", []domain.Event{sub(automated()), start(1), timedOut(1), timedOut(1)}},

		{"finding before any attempt", []domain.Event{sub(automated()), found(1, domain.DecisionAccepted)}},
		{"finding for another attempt", []domain.Event{sub(automated()), start(1), found(2, domain.DecisionAccepted)}},
		{"finding for a timed-out attempt", []domain.Event{sub(automated()), start(1), timedOut(1), found(1, domain.DecisionAccepted)}},
		{"finding with an empty state", []domain.Event{sub(automated()), start(1), found(1, "")}},
		{"finding with state manual_review", []domain.Event{sub(automated()), start(1), found(1, "manual_review")}},
		{"second finding", []domain.Event{sub(automated()), start(1), found(1, domain.DecisionAccepted), found(1, domain.DecisionRejected)}},
		{"finding in manual_review", then(queued, found(1, domain.DecisionAccepted))},

		{"escalation of an accepted review", []domain.Event{sub(automated()), start(1), found(1, domain.DecisionAccepted), escalated(domain.ReasonDeadlinePassed, domain.StateManualReview)}},
		{"escalation twice", then(queued, escalated(domain.ReasonDeadlinePassed, domain.StateManualReview))},
		{"escalation to accepted", []domain.Event{sub(automated()), escalated(domain.ReasonHumanGate, domain.StateAccepted)}},
		{"escalation to pending", []domain.Event{sub(automated()), escalated(domain.ReasonCancelled, domain.StatePending)}},
		{"escalation to no state", []domain.Event{sub(automated()), escalated(domain.ReasonCancelled, "")}},
		{"fail-closed rejection of a queueing class", []domain.Event{sub(automated()), escalated(domain.ReasonAttemptsExhausted, domain.StateRejected)}},
		{"human gate escalation to rejected", []domain.Event{sub(failClosed()), escalated(domain.ReasonHumanGate, domain.StateRejected)}},
		{"cancellation to rejected", []domain.Event{sub(failClosed()), escalated(domain.ReasonCancelled, domain.StateRejected)}},
		{"gated accept followed by an attempt", []domain.Event{sub(gated()), start(1), found(1, domain.DecisionAccepted), start(2)}},
		{"gated accept followed by a fail-closed rejection", []domain.Event{sub(gatedClosed), start(1), found(1, domain.DecisionAccepted), escalated(domain.ReasonAttemptsExhausted, domain.StateRejected)}},
		{"gated accept followed by another escalation", []domain.Event{sub(gated()), start(1), found(1, domain.DecisionAccepted), escalated(domain.ReasonCancelled, domain.StateManualReview)}},

		{"approval of a pending review", []domain.Event{sub(fourEyes()), approval("alice", domain.DecisionAccepted)}},
		{"approval on a single-approval class", then(queued, approval("alice", domain.DecisionAccepted))},
		{"approval with an invalid state", then(fourQueued, approval("alice", "manual_review"))},
		{"approval twice by one moderator", then(fourQueued, approval("alice", domain.DecisionAccepted), approval("alice", domain.DecisionRejected))},
		{"approval that reaches the threshold", then(fourQueued, approval("alice", domain.DecisionAccepted), approval("bob", domain.DecisionAccepted))},
		{"approval after the decision", then(fourQueued, approval("alice", domain.DecisionAccepted), decision("bob", domain.DecisionAccepted, "alice", "bob"), approval("carol", domain.DecisionAccepted))},

		{"decision on a pending review", []domain.Event{sub(automated()), decision("alice", domain.DecisionAccepted)}},
		{"decision on an accepted review", []domain.Event{sub(automated()), start(1), found(1, domain.DecisionAccepted), decision("alice", domain.DecisionRejected)}},
		{"decision with an invalid state", then(queued, decision("alice", "pending"))},
		{"second decision", then(queued, decision("alice", domain.DecisionAccepted), decision("bob", domain.DecisionRejected))},
		{"four-eyes decision by one moderator", then(fourQueued, decision("alice", domain.DecisionAccepted))},
		{"four-eyes decision naming an approver who never voted", then(fourQueued, decision("bob", domain.DecisionAccepted, "alice", "bob"))},
		{"four-eyes decision by the moderator who voted", then(fourQueued, approval("alice", domain.DecisionAccepted), decision("alice", domain.DecisionAccepted, "alice", "alice"))},
		{"four-eyes decision against the votes", then(fourQueued, approval("alice", domain.DecisionRejected), decision("bob", domain.DecisionAccepted, "alice", "bob"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, err := domain.Rehydrate(tc.history); !errors.Is(err, domain.ErrCorruptHistory) {
				t.Fatalf("Rehydrate error = %v, want ErrCorruptHistory", err)
			}
			// The last event is the impossible one: everything before it
			// loads, and refusing it leaves the review as it was.
			r, err := domain.Rehydrate(tc.history[:len(tc.history)-1])
			if err != nil {
				t.Fatalf("the history before the last event does not load: %v", err)
			}
			before := r.Clone()
			last := tc.history[len(tc.history)-1]
			err = r.Apply(uint64(len(tc.history)-1), last)
			if !errors.Is(err, domain.ErrCorruptHistory) {
				t.Fatalf("Apply error = %v, want ErrCorruptHistory", err)
			}
			if !strings.Contains(err.Error(), last.EventType()) {
				t.Fatalf("error %q does not name the event type %s", err, last.EventType())
			}
			if !reflect.DeepEqual(before, r) {
				t.Fatal("a refused event changed the review")
			}
		})
	}
}

// TestApplyRefusesOutOfOrderRevisions checks that events load only at the
// next revision: the first at 0, each following one at the last plus one.
func TestApplyRefusesOutOfOrderRevisions(t *testing.T) {
	t.Parallel()
	s := newStory(t, automated()).start(0).timeOut(1, 10*time.Second)
	next := domain.Event(domain.AttemptStarted{ReviewID: testID, Attempt: 2, AttemptTimeoutMS: 10000, StartedAt: at(11 * time.Second)})
	for _, tc := range []struct {
		name string
		rev  uint64
	}{
		{"revision skipped", 4},
		{"revision repeated", 2},
		{"revision going back", 0},
		{"revision far ahead", 1 << 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := s.review.Clone()
			err := r.Apply(tc.rev, next)
			if !errors.Is(err, domain.ErrCorruptHistory) {
				t.Fatalf("error = %v, want ErrCorruptHistory", err)
			}
			if !reflect.DeepEqual(s.review, r) {
				t.Fatal("a refused event changed the review")
			}
		})
	}
	t.Run("first event at revision 1", func(t *testing.T) {
		t.Parallel()
		r := &domain.Review{}
		if err := r.Apply(1, s.events[0]); !errors.Is(err, domain.ErrCorruptHistory) {
			t.Fatalf("error = %v, want ErrCorruptHistory", err)
		}
		if r.Exists() {
			t.Fatal("a refused Submitted created the review")
		}
	})
	t.Run("next revision", func(t *testing.T) {
		t.Parallel()
		r := s.review.Clone()
		if err := r.Apply(3, next); err != nil {
			t.Fatal(err)
		}
		if r.Version() != 3 || r.Attempts() != 2 {
			t.Fatalf("version %d, attempts %d; want 3 and 2", r.Version(), r.Attempts())
		}
	})
}

func TestRehydrate(t *testing.T) {
	t.Parallel()
	t.Run("no events is a review that does not exist", func(t *testing.T) {
		t.Parallel()
		r, err := domain.Rehydrate(nil)
		if err != nil || r.Exists() {
			t.Fatalf("Rehydrate(nil) = %+v, %v; want a review that does not exist", r, err)
		}
	})
	t.Run("equals the review built event by event", func(t *testing.T) {
		t.Parallel()
		s := newStory(t, fourEyes()).toManual().vote("alice", domain.DecisionRejected, 15*time.Second).vote("bob", domain.DecisionRejected, 16*time.Second)
		r, err := domain.Rehydrate(s.events)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(r, s.review) {
			t.Fatalf("rehydrated %+v\nincremental %+v", r, s.review)
		}
		if r.State() != domain.StateRejected || r.Version() != 5 || r.DecidedBy() != "bob" {
			t.Fatalf("state %s, version %d, decided by %q", r.State(), r.Version(), r.DecidedBy())
		}
	})
	t.Run("clone shares nothing with the original", func(t *testing.T) {
		t.Parallel()
		s := newStory(t, fourEyes()).toManual().vote("alice", domain.DecisionAccepted, 15*time.Second)
		c := s.review.Clone()
		s.vote("bob", domain.DecisionAccepted, 16*time.Second)
		if c.State() != domain.StateManualReview || len(c.Approvals()[domain.DecisionAccepted]) != 1 {
			t.Fatalf("clone moved with the original: %s, %v", c.State(), c.Approvals())
		}
	})
}
