package domain_test

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/domain"
)

// transition is one command applied to a review with a given history.
type transition struct {
	name   string
	policy domain.ClassPolicy // automated() when zero
	given  func(s *story)     // the history before the command
	when   func(r *domain.Review) ([]domain.Event, error)

	// A legal transition returns events of these types and leaves the
	// review in state once they are applied.
	want  []string
	state domain.State
	check func(t *testing.T, r *domain.Review, events []domain.Event)

	// An illegal one returns an error matching err and no events.
	err error
}

func TestTransitions(t *testing.T) {
	t.Parallel()
	cases := slices.Concat(legalTransitions(), escalationTransitions(), illegalTransitions())
	seen := make(map[string]bool)
	for _, tc := range cases {
		if seen[tc.name] {
			t.Fatalf("duplicate case name %q", tc.name)
		}
		seen[tc.name] = true
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := tc.policy
			if p.MaxAttempts == 0 {
				p = automated()
			}
			s := newStory(t, p)
			if tc.given != nil {
				tc.given(s)
			}
			before := s.review.Clone()
			events, err := tc.when(s.review)
			if !reflect.DeepEqual(before, s.review) {
				t.Fatal("the command changed the review; only Apply may")
			}
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("error = %v, want %v", err, tc.err)
				}
				if len(events) != 0 {
					t.Fatalf("refused command returned events %v", types(events))
				}
				return
			}
			if err != nil {
				t.Fatalf("error = %v, want events %v", err, tc.want)
			}
			if got := types(events); !slices.Equal(got, tc.want) {
				t.Fatalf("events = %v, want %v", got, tc.want)
			}
			s.apply(events...)
			if got := s.review.State(); got != tc.state {
				t.Fatalf("state = %s, want %s", got, tc.state)
			}
			if got, want := s.review.Version(), uint64(len(s.events)-1); got != want {
				t.Fatalf("version = %d, want %d", got, want)
			}
			if tc.check != nil {
				tc.check(t, s.review, events)
			}
		})
	}
}

func legalTransitions() []transition {
	findAt := func(attempt int, state domain.Decision, now time.Duration, source string) func(r *domain.Review) ([]domain.Event, error) {
		return func(r *domain.Review) ([]domain.Event, error) {
			return r.RecordFinding(finding(attempt, state), source, at(now))
		}
	}
	decide := func(moderator string, state domain.Decision) func(r *domain.Review) ([]domain.Event, error) {
		return func(r *domain.Review) ([]domain.Event, error) {
			return r.DecideManually(vote(r, moderator, state), at(20*time.Second))
		}
	}
	decided := func(by string, when time.Time) func(t *testing.T, r *domain.Review, _ []domain.Event) {
		return func(t *testing.T, r *domain.Review, _ []domain.Event) {
			t.Helper()
			if r.DecidedBy() != by || !r.DecidedAt().Equal(when) {
				t.Fatalf("decided by %q at %v, want %q at %v", r.DecidedBy(), r.DecidedAt(), by, when)
			}
		}
	}
	return []transition{
		{
			name: "first attempt starts with the attempt_timeout cap",
			when: func(r *domain.Review) ([]domain.Event, error) { return one(r.StartAttempt(at(0))) },
			want: []string{domain.TypeAttemptStarted}, state: domain.StatePending,
			check: func(t *testing.T, r *domain.Review, events []domain.Event) {
				e := events[0].(domain.AttemptStarted)
				want := domain.AttemptStarted{ReviewID: testID, Attempt: 1, AttemptTimeoutMS: 10000, RemainingBudgetMS: 30000, StartedAt: t0}
				if !reflect.DeepEqual(e, want) {
					t.Fatalf("event = %+v, want %+v", e, want)
				}
				attempt, rev, started, timeout := r.InFlight()
				if attempt != 1 || rev != 1 || !started.Equal(t0) || timeout != 10*time.Second {
					t.Fatalf("in flight = %d at revision %d since %v for %s", attempt, rev, started, timeout)
				}
			},
		},
		{
			name:  "retry after a timeout starts the next attempt",
			given: func(s *story) { s.start(0).timeOut(1, 10*time.Second) },
			when: func(r *domain.Review) ([]domain.Event, error) {
				return one(r.StartAttempt(at(10*time.Second + 100*time.Millisecond)))
			},
			want: []string{domain.TypeAttemptStarted}, state: domain.StatePending,
			check: func(t *testing.T, r *domain.Review, events []domain.Event) {
				if e := events[0].(domain.AttemptStarted); e.Attempt != 2 || e.AttemptTimeoutMS != 10000 || e.RemainingBudgetMS != 19900 {
					t.Fatalf("event = %+v, want attempt 2 of 10000 ms with 19900 ms left", e)
				}
				if r.Attempts() != 2 {
					t.Fatalf("attempts = %d, want 2", r.Attempts())
				}
			},
		},
		{
			name:  "attempt near the deadline gets only the time remaining",
			given: func(s *story) { s.start(0).timeOut(1, 10*time.Second).start(11*time.Second).timeOut(2, 21*time.Second) },
			when:  func(r *domain.Review) ([]domain.Event, error) { return one(r.StartAttempt(at(25 * time.Second))) },
			want:  []string{domain.TypeAttemptStarted}, state: domain.StatePending,
			check: func(t *testing.T, r *domain.Review, events []domain.Event) {
				if e := events[0].(domain.AttemptStarted); e.Attempt != 3 || e.AttemptTimeoutMS != 5000 || e.RemainingBudgetMS != 5000 {
					t.Fatalf("event = %+v, want attempt 3 of 5000 ms", e)
				}
			},
		},
		{
			name:  "timeout leaves the review pending",
			given: func(s *story) { s.start(0) },
			when: func(r *domain.Review) ([]domain.Event, error) {
				return one(r.TimeOutAttempt(domain.AttemptFailure{Attempt: 1, Classification: domain.ClassRateLimited, Detail: "429", RetryAfter: 3 * time.Second}, at(4*time.Second)))
			},
			want: []string{domain.TypeAttemptTimedOut}, state: domain.StatePending,
			check: func(t *testing.T, r *domain.Review, events []domain.Event) {
				want := domain.AttemptTimedOut{ReviewID: testID, Attempt: 1, Classification: domain.ClassRateLimited, ElapsedMS: 4000, Detail: "429", RetryAfterMS: 3000, At: at(4 * time.Second)}
				if e := events[0].(domain.AttemptTimedOut); e != want {
					t.Fatalf("event = %+v, want %+v", e, want)
				}
				if attempt, _, _, _ := r.InFlight(); attempt != 0 || !r.DecidedAt().IsZero() {
					t.Fatalf("in flight = %d, decided at %v; a timeout decides nothing", attempt, r.DecidedAt())
				}
			},
		},
		{
			name:  "finding accepts a pending review",
			given: func(s *story) { s.start(0) },
			when:  findAt(1, domain.DecisionAccepted, 2*time.Second, domain.SourceResponse),
			want:  []string{domain.TypeFindingReceived}, state: domain.StateAccepted,
			check: func(t *testing.T, r *domain.Review, events []domain.Event) {
				want := domain.FindingReceived{ReviewID: testID, Attempt: 1, State: domain.DecisionAccepted, Reasons: []string{"policy:ok"}, Source: domain.SourceResponse, ElapsedMS: 2000, ReceivedAt: at(2 * time.Second)}
				if e := events[0].(domain.FindingReceived); !reflect.DeepEqual(e, want) {
					t.Fatalf("event = %+v, want %+v", e, want)
				}
				decided("provider", at(2*time.Second))(t, r, events)
				if attempt, _, _, _ := r.InFlight(); attempt != 0 {
					t.Fatalf("attempt %d still in flight after its finding", attempt)
				}
			},
		},
		{
			name:  "finding by callback rejects a pending review",
			given: func(s *story) { s.start(0) },
			when:  findAt(1, domain.DecisionRejected, 3*time.Second, domain.SourceCallback),
			want:  []string{domain.TypeFindingReceived}, state: domain.StateRejected,
			check: func(t *testing.T, r *domain.Review, events []domain.Event) {
				if e := events[0].(domain.FindingReceived); e.Source != domain.SourceCallback {
					t.Fatalf("source = %q, want callback", e.Source)
				}
				if got := r.Reasons(); !slices.Equal(got, []string{"policy:ok"}) {
					t.Fatalf("reasons = %v", got)
				}
				decided("provider", at(3*time.Second))(t, r, events)
			},
		},
		{
			name:  "finding on the last instant of its attempt is in time",
			given: func(s *story) { s.start(0) },
			when:  findAt(1, domain.DecisionAccepted, 10*time.Second, domain.SourceResponse),
			want:  []string{domain.TypeFindingReceived}, state: domain.StateAccepted,
		},
		{
			name:  "finding for the retry after a timed-out attempt",
			given: func(s *story) { s.start(0).timeOut(1, 10*time.Second).start(11 * time.Second) },
			when:  findAt(2, domain.DecisionRejected, 12*time.Second, domain.SourceResponse),
			want:  []string{domain.TypeFindingReceived}, state: domain.StateRejected,
		},
		{
			name:  "finding without reasons records an empty list",
			given: func(s *story) { s.start(0) },
			when: func(r *domain.Review) ([]domain.Event, error) {
				return r.RecordFinding(domain.Finding{ReviewID: testID, Attempt: 1, State: domain.DecisionAccepted}, domain.SourceResponse, at(time.Second))
			},
			want: []string{domain.TypeFindingReceived}, state: domain.StateAccepted,
			check: func(t *testing.T, _ *domain.Review, events []domain.Event) {
				if e := events[0].(domain.FindingReceived); e.Reasons == nil || len(e.Reasons) != 0 {
					t.Fatalf("reasons = %#v, want an empty list", e.Reasons)
				}
			},
		},
		{
			name:   "human gate holds an automated accept for a moderator",
			policy: gated(),
			given:  func(s *story) { s.start(0) },
			when:   findAt(1, domain.DecisionAccepted, 2*time.Second, domain.SourceResponse),
			want:   []string{domain.TypeFindingReceived, domain.TypeEscalated}, state: domain.StateManualReview,
			check: func(t *testing.T, r *domain.Review, events []domain.Event) {
				if e := events[1].(domain.Escalated); e.Reason != domain.ReasonHumanGate || e.State != domain.StateManualReview || e.Attempts != 1 {
					t.Fatalf("escalation = %+v", e)
				}
				if r.EscalationReason() != domain.ReasonHumanGate || !r.DecidedAt().IsZero() {
					t.Fatalf("escalated for %q, decided at %v", r.EscalationReason(), r.DecidedAt())
				}
			},
		},
		{
			name:   "human gate lets an automated reject stand",
			policy: gated(),
			given:  func(s *story) { s.start(0) },
			when:   findAt(1, domain.DecisionRejected, 2*time.Second, domain.SourceResponse),
			want:   []string{domain.TypeFindingReceived}, state: domain.StateRejected,
		},
		{
			name:   "human gate on a fail-closed class still queues the accept",
			policy: func() domain.ClassPolicy { p := failClosed(); p.HumanGate = true; return p }(),
			given:  func(s *story) { s.start(0) },
			when:   findAt(1, domain.DecisionAccepted, 2*time.Second, domain.SourceCallback),
			want:   []string{domain.TypeFindingReceived, domain.TypeEscalated}, state: domain.StateManualReview,
		},
		{
			name:  "moderator accepts a queued review",
			given: func(s *story) { s.toManual() },
			when:  decide("alice", domain.DecisionAccepted),
			want:  []string{domain.TypeManualDecisionRecorded}, state: domain.StateAccepted,
			check: func(t *testing.T, r *domain.Review, events []domain.Event) {
				e := events[0].(domain.ManualDecisionRecorded)
				if e.Moderator != "alice" || e.Approvers != nil || e.Note != "checked by alice" {
					t.Fatalf("decision = %+v", e)
				}
				decided("alice", at(20*time.Second))(t, r, events)
				if got := r.Reasons(); !slices.Equal(got, []string{"checked by alice"}) {
					t.Fatalf("reasons = %v, want the note", got)
				}
			},
		},
		{
			name:  "moderator rejects a queued review",
			given: func(s *story) { s.toManual() },
			when:  decide("alice", domain.DecisionRejected),
			want:  []string{domain.TypeManualDecisionRecorded}, state: domain.StateRejected,
		},
		{
			name:   "moderator accepts a review the human gate held",
			policy: gated(),
			given:  func(s *story) { s.start(0).find(1, domain.DecisionAccepted, time.Second) },
			when:   decide("alice", domain.DecisionAccepted),
			want:   []string{domain.TypeManualDecisionRecorded}, state: domain.StateAccepted,
		},
		{
			name:  "moderator decides a review cancelled with an attempt in flight",
			given: func(s *story) { s.start(0).escalate(domain.ReasonCancelled, time.Second) },
			when:  decide("alice", domain.DecisionRejected),
			want:  []string{domain.TypeManualDecisionRecorded}, state: domain.StateRejected,
		},
		{
			name:   "four-eyes first vote is recorded without deciding",
			policy: fourEyes(),
			given:  func(s *story) { s.toManual() },
			when:   decide("alice", domain.DecisionAccepted),
			want:   []string{domain.TypeManualApprovalRecorded}, state: domain.StateManualReview,
			check: func(t *testing.T, r *domain.Review, _ []domain.Event) {
				want := map[domain.Decision][]string{domain.DecisionAccepted: {"alice"}}
				if got := r.Approvals(); !reflect.DeepEqual(got, want) {
					t.Fatalf("approvals = %v, want %v", got, want)
				}
				if !r.DecidedAt().IsZero() {
					t.Fatal("a single vote decided the review")
				}
			},
		},
		{
			name:   "four-eyes first reject vote is recorded without deciding",
			policy: fourEyes(),
			given:  func(s *story) { s.toManual() },
			when:   decide("alice", domain.DecisionRejected),
			want:   []string{domain.TypeManualApprovalRecorded}, state: domain.StateManualReview,
		},
		{
			name:   "four-eyes second moderator agreeing decides",
			policy: fourEyes(),
			given:  func(s *story) { s.toManual().vote("alice", domain.DecisionAccepted, 15*time.Second) },
			when:   decide("bob", domain.DecisionAccepted),
			want:   []string{domain.TypeManualDecisionRecorded}, state: domain.StateAccepted,
			check: func(t *testing.T, r *domain.Review, events []domain.Event) {
				if e := events[0].(domain.ManualDecisionRecorded); !slices.Equal(e.Approvers, []string{"alice", "bob"}) || e.Moderator != "bob" {
					t.Fatalf("decision = %+v, want approvers alice and bob", e)
				}
				decided("bob", at(20*time.Second))(t, r, events)
			},
		},
		{
			name:   "four-eyes disagreeing votes do not decide",
			policy: fourEyes(),
			given:  func(s *story) { s.toManual().vote("alice", domain.DecisionAccepted, 15*time.Second) },
			when:   decide("bob", domain.DecisionRejected),
			want:   []string{domain.TypeManualApprovalRecorded}, state: domain.StateManualReview,
			check: func(t *testing.T, r *domain.Review, _ []domain.Event) {
				want := map[domain.Decision][]string{domain.DecisionAccepted: {"alice"}, domain.DecisionRejected: {"bob"}}
				if got := r.Approvals(); !reflect.DeepEqual(got, want) {
					t.Fatalf("approvals = %v, want %v", got, want)
				}
			},
		},
		{
			name:   "four-eyes third moderator settles a disagreement",
			policy: fourEyes(),
			given: func(s *story) {
				s.toManual().vote("alice", domain.DecisionAccepted, 15*time.Second).vote("bob", domain.DecisionRejected, 16*time.Second)
			},
			when: decide("carol", domain.DecisionRejected),
			want: []string{domain.TypeManualDecisionRecorded}, state: domain.StateRejected,
			check: func(t *testing.T, _ *domain.Review, events []domain.Event) {
				if e := events[0].(domain.ManualDecisionRecorded); !slices.Equal(e.Approvers, []string{"bob", "carol"}) {
					t.Fatalf("approvers = %v, want bob and carol", e.Approvers)
				}
			},
		},
	}
}

// escalationTransitions covers every escalation reason on a class that
// queues exhausted work and on one that fails closed.
func escalationTransitions() []transition {
	reasons := []domain.EscalationReason{
		domain.ReasonAttemptsExhausted, domain.ReasonBudgetExhausted, domain.ReasonDeadlinePassed,
		domain.ReasonProviderRefused, domain.ReasonRetryBudgetExhausted, domain.ReasonHumanGate, domain.ReasonCancelled,
	}
	var cases []transition
	for _, closed := range []bool{false, true} {
		for _, reason := range reasons {
			policy, target, class := automated(), domain.StateManualReview, "queueing"
			if closed {
				policy, class = failClosed(), "fail-closed"
				switch reason {
				case domain.ReasonAttemptsExhausted, domain.ReasonBudgetExhausted, domain.ReasonDeadlinePassed:
					// Only the class's own exhaustion fails closed; a
					// provider fault or a human gate goes to a moderator.
					target = domain.StateRejected
				}
			}
			cases = append(cases, transition{
				name:   fmt.Sprintf("%s class escalates %s to %s", class, reason, target),
				policy: policy,
				given:  func(s *story) { s.start(0).timeOut(1, 10*time.Second) },
				when: func(r *domain.Review) ([]domain.Event, error) {
					return one(r.Escalate(reason, "after attempt 1", at(12*time.Second)))
				},
				want: []string{domain.TypeEscalated}, state: target,
				check: func(t *testing.T, r *domain.Review, events []domain.Event) {
					want := domain.Escalated{ReviewID: testID, Reason: reason, State: target, Attempts: 1, Detail: "after attempt 1", At: at(12 * time.Second)}
					if e := events[0].(domain.Escalated); e != want {
						t.Fatalf("event = %+v, want %+v", e, want)
					}
					if r.EscalationReason() != reason || !r.EscalatedAt().Equal(at(12*time.Second)) {
						t.Fatalf("escalated for %q at %v", r.EscalationReason(), r.EscalatedAt())
					}
					wantBy, wantReasons := "", []string(nil)
					if target == domain.StateRejected {
						wantBy, wantReasons = "policy", []string{"fail_closed:" + string(reason)}
					}
					if r.DecidedBy() != wantBy || !slices.Equal(r.Reasons(), wantReasons) {
						t.Fatalf("decided by %q for %v, want %q for %v", r.DecidedBy(), r.Reasons(), wantBy, wantReasons)
					}
				},
			})
		}
	}
	inFlight := func(r *domain.Review) ([]domain.Event, error) {
		return one(r.Escalate(domain.ReasonDeadlinePassed, "sweeper", at(31*time.Second)))
	}
	noneInFlight := func(t *testing.T, r *domain.Review, _ []domain.Event) {
		if attempt, _, _, _ := r.InFlight(); attempt != 0 {
			t.Fatalf("attempt %d still in flight after escalation", attempt)
		}
	}
	return append(cases,
		transition{
			name:  "sweeper queues a review past its deadline with an attempt in flight",
			given: func(s *story) { s.start(25 * time.Second) },
			when:  inFlight,
			want:  []string{domain.TypeEscalated}, state: domain.StateManualReview, check: noneInFlight,
		},
		transition{
			name:   "sweeper rejects a fail-closed review past its deadline with an attempt in flight",
			policy: failClosed(),
			given:  func(s *story) { s.start(25 * time.Second) },
			when:   inFlight,
			want:   []string{domain.TypeEscalated}, state: domain.StateRejected, check: noneInFlight,
		},
		transition{
			name: "review escalated before any attempt",
			when: func(r *domain.Review) ([]domain.Event, error) {
				return one(r.Escalate(domain.ReasonProviderRefused, "400", at(time.Second)))
			},
			want: []string{domain.TypeEscalated}, state: domain.StateManualReview,
		},
	)
}

func illegalTransitions() []transition {
	findAt := func(f domain.Finding, now time.Duration) func(r *domain.Review) ([]domain.Event, error) {
		return func(r *domain.Review) ([]domain.Event, error) {
			return r.RecordFinding(f, domain.SourceCallback, at(now))
		}
	}
	startAt := func(now time.Duration) func(r *domain.Review) ([]domain.Event, error) {
		return func(r *domain.Review) ([]domain.Event, error) { return one(r.StartAttempt(at(now))) }
	}
	timeOut := func(attempt int) func(r *domain.Review) ([]domain.Event, error) {
		return func(r *domain.Review) ([]domain.Event, error) {
			return one(r.TimeOutAttempt(domain.AttemptFailure{Attempt: attempt, Classification: domain.ClassTransportError}, at(12*time.Second)))
		}
	}
	escalate := func(r *domain.Review) ([]domain.Event, error) {
		return one(r.Escalate(domain.ReasonDeadlinePassed, "sweeper", at(31*time.Second)))
	}
	decide := func(d domain.ManualDecision) func(r *domain.Review) ([]domain.Event, error) {
		return func(r *domain.Review) ([]domain.Event, error) {
			if d.ExpectedVersion == 0 {
				d.ExpectedVersion = r.Version()
			}
			return r.DecideManually(d, at(20*time.Second))
		}
	}
	voteAs := func(moderator string, state domain.Decision) func(r *domain.Review) ([]domain.Event, error) {
		return decide(domain.ManualDecision{Moderator: moderator, State: state})
	}
	accepted := func(s *story) { s.start(0).find(1, domain.DecisionAccepted, time.Second) }
	rejected := func(s *story) { s.start(0).find(1, domain.DecisionRejected, time.Second) }
	queued := func(s *story) { s.toManual() }
	moderated := func(s *story) { s.toManual().vote("alice", domain.DecisionAccepted, 15*time.Second) }
	closedOut := func(s *story) {
		s.start(0).timeOut(1, 10*time.Second).escalate(domain.ReasonAttemptsExhausted, 10*time.Second)
	}
	exhausted := func(s *story) {
		s.start(0).timeOut(1, 5*time.Second).start(6*time.Second).timeOut(2, 10*time.Second).start(11*time.Second).timeOut(3, 15*time.Second)
	}
	f := finding
	return []transition{
		// Findings.
		{name: "finding for an accepted review", given: accepted, when: findAt(f(1, domain.DecisionRejected), 2*time.Second), err: domain.ErrNotPending},
		{name: "finding for a rejected review", given: rejected, when: findAt(f(1, domain.DecisionAccepted), 2*time.Second), err: domain.ErrNotPending},
		{name: "finding for a queued review", given: func(s *story) { s.start(0).escalate(domain.ReasonCancelled, time.Second) }, when: findAt(f(1, domain.DecisionAccepted), 2*time.Second), err: domain.ErrNotPending},
		{name: "finding for a review a moderator decided", given: moderated, when: findAt(f(1, domain.DecisionRejected), 2*time.Second), err: domain.ErrNotPending},
		{name: "finding for a fail-closed rejection", policy: failClosed(), given: closedOut, when: findAt(f(1, domain.DecisionAccepted), 11*time.Second), err: domain.ErrNotPending},
		{name: "finding for a review the human gate queued", policy: gated(), given: accepted, when: findAt(f(1, domain.DecisionAccepted), 2*time.Second), err: domain.ErrNotPending},
		{name: "second finding for the same attempt", given: accepted, when: findAt(f(1, domain.DecisionAccepted), time.Second), err: domain.ErrNotPending},
		{name: "finding before any attempt started", when: findAt(f(1, domain.DecisionAccepted), time.Second), err: domain.ErrAttemptNotInFlight},
		{name: "finding for an attempt that timed out", given: func(s *story) { s.start(0).timeOut(1, 10*time.Second) }, when: findAt(f(1, domain.DecisionAccepted), 10*time.Second), err: domain.ErrAttemptNotInFlight},
		{name: "late finding of an earlier attempt while a newer one is in flight", given: func(s *story) { s.start(0).timeOut(1, 10*time.Second).start(11 * time.Second) }, when: findAt(f(1, domain.DecisionAccepted), 12*time.Second), err: domain.ErrAttemptNotInFlight},
		{name: "finding for an attempt not yet started", given: func(s *story) { s.start(0) }, when: findAt(f(2, domain.DecisionAccepted), time.Second), err: domain.ErrAttemptNotInFlight},
		{name: "finding for attempt zero", given: func(s *story) { s.start(0) }, when: findAt(f(0, domain.DecisionAccepted), time.Second), err: domain.ErrAttemptNotInFlight},
		{name: "finding after its attempt's timeout", given: func(s *story) { s.start(0) }, when: findAt(f(1, domain.DecisionAccepted), 10*time.Second+time.Nanosecond), err: domain.ErrAttemptNotInFlight},
		{name: "finding after a shortened last attempt's timeout", given: func(s *story) {
			s.start(0).timeOut(1, 10*time.Second).start(11*time.Second).timeOut(2, 21*time.Second).start(25 * time.Second)
		}, when: findAt(f(3, domain.DecisionAccepted), 30*time.Second+time.Millisecond), err: domain.ErrAttemptNotInFlight},
		{name: "finding naming another review", given: func(s *story) { s.start(0) }, when: findAt(domain.Finding{ReviewID: "rev-2", Attempt: 1, State: domain.DecisionAccepted}, time.Second), err: domain.ErrInvalidFinding},
		{name: "finding without a review ID", given: func(s *story) { s.start(0) }, when: findAt(domain.Finding{Attempt: 1, State: domain.DecisionAccepted}, time.Second), err: domain.ErrInvalidFinding},
		{name: "finding with an empty state", given: func(s *story) { s.start(0) }, when: findAt(f(1, ""), time.Second), err: domain.ErrInvalidFinding},
		{name: "finding with state pending", given: func(s *story) { s.start(0) }, when: findAt(f(1, "pending"), time.Second), err: domain.ErrInvalidFinding},
		{name: "finding with state manual_review", given: func(s *story) { s.start(0) }, when: findAt(f(1, "manual_review"), time.Second), err: domain.ErrInvalidFinding},
		{name: "finding with an unknown state", given: func(s *story) { s.start(0) }, when: findAt(f(1, "safe"), time.Second), err: domain.ErrInvalidFinding},
		{name: "finding with a state in the wrong case", given: func(s *story) { s.start(0) }, when: findAt(f(1, "Accepted"), time.Second), err: domain.ErrInvalidFinding},

		// Manual decisions.
		{name: "decision on a pending review", given: func(s *story) { s.start(0) }, when: voteAs("alice", domain.DecisionAccepted), err: domain.ErrNotInManualReview},
		{name: "decision on a review accepted by a finding", given: accepted, when: voteAs("alice", domain.DecisionRejected), err: domain.ErrNotInManualReview},
		{name: "decision on a review rejected by a finding", given: rejected, when: voteAs("alice", domain.DecisionAccepted), err: domain.ErrNotInManualReview},
		{name: "second terminal decision by another moderator", given: moderated, when: voteAs("bob", domain.DecisionRejected), err: domain.ErrNotInManualReview},
		{name: "second terminal decision by the same moderator", given: moderated, when: voteAs("alice", domain.DecisionAccepted), err: domain.ErrNotInManualReview},
		{name: "decision on a fail-closed rejection", policy: failClosed(), given: closedOut, when: voteAs("alice", domain.DecisionAccepted), err: domain.ErrNotInManualReview},
		{name: "four-eyes vote after the decision", policy: fourEyes(), given: func(s *story) {
			s.toManual().vote("alice", domain.DecisionAccepted, 15*time.Second).vote("bob", domain.DecisionAccepted, 16*time.Second)
		}, when: voteAs("carol", domain.DecisionRejected), err: domain.ErrNotInManualReview},
		{name: "decision against a stale version", given: queued, when: decide(domain.ManualDecision{Moderator: "alice", State: domain.DecisionAccepted, ExpectedVersion: 2}), err: domain.ErrVersionMismatch},
		{name: "decision against a version not yet written", given: queued, when: decide(domain.ManualDecision{Moderator: "alice", State: domain.DecisionAccepted, ExpectedVersion: 99}), err: domain.ErrVersionMismatch},
		{name: "four-eyes second vote against the version before the first", policy: fourEyes(), given: func(s *story) {
			s.toManual().vote("alice", domain.DecisionAccepted, 15*time.Second)
		}, when: decide(domain.ManualDecision{Moderator: "bob", State: domain.DecisionAccepted, ExpectedVersion: 3}), err: domain.ErrVersionMismatch},
		{name: "four-eyes same moderator twice", policy: fourEyes(), given: func(s *story) {
			s.toManual().vote("alice", domain.DecisionAccepted, 15*time.Second)
		}, when: voteAs("alice", domain.DecisionAccepted), err: domain.ErrAlreadyApproved},
		{name: "four-eyes moderator changing sides", policy: fourEyes(), given: func(s *story) {
			s.toManual().vote("alice", domain.DecisionAccepted, 15*time.Second)
		}, when: voteAs("alice", domain.DecisionRejected), err: domain.ErrAlreadyApproved},
		{name: "decision with an empty state", given: queued, when: voteAs("alice", ""), err: domain.ErrInvalidDecision},
		{name: "decision to manual_review", given: queued, when: voteAs("alice", "manual_review"), err: domain.ErrInvalidDecision},
		{name: "decision to pending", given: queued, when: voteAs("alice", "pending"), err: domain.ErrInvalidDecision},
		{name: "decision without a moderator", given: queued, when: voteAs("", domain.DecisionAccepted), err: domain.ErrInvalidDecision},

		// Attempts.
		{name: "attempt while one is in flight", given: func(s *story) { s.start(0) }, when: startAt(time.Second), err: domain.ErrAttemptInFlight},
		{name: "attempt past max_attempts", given: exhausted, when: startAt(16 * time.Second), err: domain.ErrAttemptsExhausted},
		{name: "second attempt of a one-attempt class", policy: func() domain.ClassPolicy { p := automated(); p.MaxAttempts = 1; return p }(), given: func(s *story) {
			s.start(0).timeOut(1, 10*time.Second)
		}, when: startAt(11 * time.Second), err: domain.ErrAttemptsExhausted},
		{name: "attempt at the deadline", given: func(s *story) { s.start(0).timeOut(1, 10*time.Second) }, when: startAt(30 * time.Second), err: domain.ErrBudgetExhausted},
		{name: "attempt past the deadline", given: func(s *story) { s.start(0).timeOut(1, 10*time.Second) }, when: startAt(45 * time.Second), err: domain.ErrBudgetExhausted},
		{name: "attempt with less than a millisecond left", given: func(s *story) { s.start(0).timeOut(1, 10*time.Second) }, when: startAt(30*time.Second - time.Microsecond), err: domain.ErrBudgetExhausted},
		{name: "attempt on an accepted review", given: accepted, when: startAt(2 * time.Second), err: domain.ErrNotPending},
		{name: "attempt on a queued review", given: queued, when: startAt(11 * time.Second), err: domain.ErrNotPending},
		{name: "timing out an attempt that already timed out", given: func(s *story) { s.start(0).timeOut(1, 10*time.Second) }, when: timeOut(1), err: domain.ErrAttemptNotInFlight},
		{name: "timing out an attempt not yet started", given: func(s *story) { s.start(0) }, when: timeOut(2), err: domain.ErrAttemptNotInFlight},
		{name: "timing out before any attempt", when: timeOut(1), err: domain.ErrAttemptNotInFlight},
		{name: "timing out an attempt of a decided review", given: accepted, when: timeOut(1), err: domain.ErrNotPending},
		{name: "timing out an attempt of a queued review", given: func(s *story) { s.start(0).escalate(domain.ReasonCancelled, time.Second) }, when: timeOut(1), err: domain.ErrNotPending},

		// Escalations.
		{name: "escalating an accepted review", given: accepted, when: escalate, err: domain.ErrNotPending},
		{name: "escalating a rejected review", given: rejected, when: escalate, err: domain.ErrNotPending},
		{name: "escalating a queued review", given: queued, when: escalate, err: domain.ErrNotPending},
		{name: "escalating a fail-closed rejection", policy: failClosed(), given: closedOut, when: escalate, err: domain.ErrNotPending},
		{name: "escalating a review a moderator decided", given: moderated, when: escalate, err: domain.ErrNotPending},
	}
}

// TestDecisionFieldErrors checks that a bad decision names the field at
// fault.
func TestDecisionFieldErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		d     domain.ManualDecision
		field string
	}{
		{"unknown state", domain.ManualDecision{Moderator: "alice", State: "maybe"}, "state"},
		{"no moderator", domain.ManualDecision{State: domain.DecisionAccepted}, "moderator"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStory(t, automated()).toManual()
			tc.d.ExpectedVersion = s.review.Version()
			_, err := s.review.DecideManually(tc.d, at(20*time.Second))
			var fe *domain.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || !errors.Is(err, domain.ErrInvalidDecision) {
				t.Fatalf("error = %v, want a field error on %q wrapping ErrInvalidDecision", err, tc.field)
			}
		})
	}
}

// TestCommandsOnMissingReview checks that every command on a review that
// was never submitted is ErrReviewNotFound.
func TestCommandsOnMissingReview(t *testing.T) {
	t.Parallel()
	commands := map[string]func(r *domain.Review) error{
		"StartAttempt": func(r *domain.Review) error { _, err := r.StartAttempt(t0); return err },
		"TimeOutAttempt": func(r *domain.Review) error {
			_, err := r.TimeOutAttempt(domain.AttemptFailure{Attempt: 1}, t0)
			return err
		},
		"RecordFinding": func(r *domain.Review) error {
			_, err := r.RecordFinding(finding(1, domain.DecisionAccepted), domain.SourceResponse, t0)
			return err
		},
		"Escalate": func(r *domain.Review) error { _, err := r.Escalate(domain.ReasonCancelled, "", t0); return err },
		"DecideManually": func(r *domain.Review) error {
			_, err := r.DecideManually(domain.ManualDecision{Moderator: "alice", State: domain.DecisionAccepted}, t0)
			return err
		},
	}
	for name, command := range commands {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if err := command(&domain.Review{}); !errors.Is(err, domain.ErrReviewNotFound) {
				t.Fatalf("error = %v, want ErrReviewNotFound", err)
			}
		})
	}
}

func TestSubmit(t *testing.T) {
	t.Parallel()
	base := domain.SubmitCommand{
		ReviewID: testID, ContentClass: testClass, ContentType: "text/vtt", PayloadDigest: "sha256:00ff",
		PayloadBytes: 42, Policy: automated(), SubmittedBy: "platform",
		Now: time.Date(2026, 3, 1, 13, 0, 0, 0, time.FixedZone("CET", 3600)),
	}
	t.Run("opens a pending review with its deadline", func(t *testing.T) {
		t.Parallel()
		e, err := domain.Submit(base)
		if err != nil {
			t.Fatal(err)
		}
		want := domain.Submitted{
			ReviewID: testID, ContentClass: testClass, ContentType: "text/vtt", PayloadDigest: "sha256:00ff",
			PayloadBytes: 42, Policy: automated().Snapshot(), SubmittedAt: t0, Deadline: at(30 * time.Second), SubmittedBy: "platform",
		}
		if e != want {
			t.Fatalf("event = %+v, want %+v", e, want)
		}
		if e.SubmittedAt.Location() != time.UTC {
			t.Fatalf("submitted_at in %v, want UTC", e.SubmittedAt.Location())
		}
		r, err := domain.Rehydrate([]domain.Event{e})
		if err != nil {
			t.Fatal(err)
		}
		if r.State() != domain.StatePending || r.ID() != testID || r.Class() != testClass || r.Version() != 0 ||
			!r.Deadline().Equal(at(30*time.Second)) || r.Attempts() != 0 || r.Policy().Snapshot() != automated().Snapshot() {
			t.Fatalf("review = %+v", r)
		}
		ct := r.ContentType()
		if !r.SameSubmission(testClass, ct, "sha256:00ff") || r.SameSubmission("transcript_import", ct, "sha256:00ff") ||
			r.SameSubmission(testClass, ct, "sha256:11ee") || r.SameSubmission(testClass, ct+"x", "sha256:00ff") {
			t.Fatal("SameSubmission must match class, content type and digest exactly")
		}
		if r.Remaining(at(10*time.Second)) != 20*time.Second {
			t.Fatalf("remaining = %s, want 20s", r.Remaining(at(10*time.Second)))
		}
	})
	for _, tc := range []struct {
		name   string
		change func(*domain.SubmitCommand)
		err    error
	}{
		{"invalid review ID", func(c *domain.SubmitCommand) { c.ReviewID = "a/b" }, domain.ErrInvalidReviewID},
		{"empty review ID", func(c *domain.SubmitCommand) { c.ReviewID = "" }, domain.ErrInvalidReviewID},
		{"empty content class", func(c *domain.SubmitCommand) { c.ContentClass = "" }, domain.ErrUnknownClass},
		{"invalid policy", func(c *domain.SubmitCommand) { c.Policy.MaxAttempts = 0 }, domain.ErrInvalidPolicy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cmd := base
			tc.change(&cmd)
			if _, err := domain.Submit(cmd); !errors.Is(err, tc.err) {
				t.Fatalf("error = %v, want %v", err, tc.err)
			}
		})
	}
	if (&domain.Review{}).SameSubmission("", "", "") {
		t.Fatal("a review that does not exist matches no submission")
	}
}
