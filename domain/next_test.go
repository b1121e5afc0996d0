package domain_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/domain"
)

// failWith closes attempt n as c at now, with a Retry-After.
func (s *story) failWith(n int, c domain.Classification, retryAfter, now time.Duration) *story {
	s.tb.Helper()
	e, err := s.review.TimeOutAttempt(domain.AttemptFailure{Attempt: n, Classification: c, Detail: "scripted", RetryAfter: retryAfter}, at(now))
	if err != nil {
		s.tb.Fatalf("TimeOutAttempt %d at %s: %v", n, now, err)
	}
	s.apply(e)
	return s
}

// backoff is the wait automated() gives testID's retry after attempt n.
func backoff(n int) time.Duration {
	return automated().Backoff.Delay(n, domain.JitterSource(testID, n))
}

var allowed = domain.Facts{RetryAllowed: true}

// Every branch of Next, by name. docs/domain-tests.md lists them.
func TestNext(t *testing.T) {
	t.Parallel()
	short := automated()
	short.Budget, short.AttemptTimeout = 2*time.Second, 2*time.Second
	cases := []struct {
		name   string
		policy domain.ClassPolicy
		given  func(s *story)
		now    time.Duration
		facts  domain.Facts
		want   domain.Step
	}{
		{name: "not pending: nothing to do", given: func(s *story) { s.start(0).find(1, domain.DecisionAccepted, time.Second) },
			now: 2 * time.Second, facts: allowed, want: domain.Step{Kind: domain.StepNone}},
		{name: "in manual review: nothing to do", given: func(s *story) { s.toManual() },
			now: 11 * time.Second, facts: allowed, want: domain.Step{Kind: domain.StepNone}},
		{name: "new review: first attempt with the attempt cap", now: 0, facts: allowed,
			want: domain.Step{Kind: domain.StepStart, Attempt: 1, Timeout: 10 * time.Second, Provider: domain.DefaultProvider}},
		{name: "first attempt does not need the retry budget", now: 0, facts: domain.Facts{},
			want: domain.Step{Kind: domain.StepStart, Attempt: 1, Timeout: 10 * time.Second, Provider: domain.DefaultProvider}},
		{name: "first attempt late in the budget: timeout is what remains", now: 25 * time.Second, facts: allowed,
			want: domain.Step{Kind: domain.StepStart, Attempt: 1, Timeout: 5 * time.Second, Provider: domain.DefaultProvider}},
		{name: "less than a millisecond left: budget exhausted", now: 30*time.Second - time.Microsecond, facts: allowed,
			want: domain.Step{Kind: domain.StepEscalate, Reason: domain.ReasonBudgetExhausted, Detail: "no time left for an attempt"}},
		{name: "attempt in flight without its owner: lost", given: func(s *story) { s.start(0) },
			now: time.Second, facts: allowed,
			want: domain.Step{Kind: domain.StepClose, Attempt: 1, Classification: domain.ClassWorkerLost, Detail: "its owner stopped renewing the lease"}},
		{name: "awaiting a callback before the timeout: wait for it", given: func(s *story) { s.start(0) },
			now: time.Second, facts: domain.Facts{Awaiting: 1},
			want: domain.Step{Kind: domain.StepWait, Until: at(10 * time.Second)}},
		{name: "awaiting a callback at the timeout: no callback came", given: func(s *story) { s.start(0) },
			now: 10 * time.Second, facts: domain.Facts{Awaiting: 1},
			want: domain.Step{Kind: domain.StepClose, Attempt: 1, Classification: domain.ClassDeadlineExceeded, Detail: "no callback before the attempt timeout"}},
		{name: "awaiting another attempt's callback: this one is lost", given: func(s *story) { s.start(0).timeOut(1, time.Second).start(2 * time.Second) },
			now: 3 * time.Second, facts: domain.Facts{Awaiting: 1},
			want: domain.Step{Kind: domain.StepClose, Attempt: 2, Classification: domain.ClassWorkerLost, Detail: "its owner stopped renewing the lease"}},
		{name: "failed attempt: wait out the backoff from its end", given: func(s *story) { s.start(0).failWith(1, domain.ClassProviderUnavailable, 0, 0) },
			now: 0, facts: allowed, want: domain.Step{Kind: domain.StepWait, Until: at(backoff(1))}},
		{name: "failed attempt: Retry-After longer than the backoff", given: func(s *story) { s.start(0).failWith(1, domain.ClassRateLimited, 5*time.Second, time.Second) },
			now: 2 * time.Second, facts: allowed, want: domain.Step{Kind: domain.StepWait, Until: at(6 * time.Second)}},
		{name: "backoff served: retry", given: func(s *story) { s.start(0).failWith(1, domain.ClassTransportError, 0, time.Second) },
			now: time.Second + backoff(1), facts: allowed,
			want: domain.Step{Kind: domain.StepStart, Attempt: 2, Timeout: 10 * time.Second, Retry: true, Provider: domain.DefaultProvider}},
		{name: "Retry-After served: retry", given: func(s *story) { s.start(0).failWith(1, domain.ClassRateLimited, 5*time.Second, time.Second) },
			now: 6 * time.Second, facts: allowed,
			want: domain.Step{Kind: domain.StepStart, Attempt: 2, Timeout: 10 * time.Second, Retry: true, Provider: domain.DefaultProvider}},
		{name: "retry budget spent: escalate", given: func(s *story) { s.start(0).failWith(1, domain.ClassProviderUnavailable, 0, time.Second) },
			now: 3 * time.Second, facts: domain.Facts{},
			want: domain.Step{Kind: domain.StepEscalate, Reason: domain.ReasonRetryBudgetExhausted, Detail: "retries over the provider's share of recent attempts"}},
		{name: "retry after a lost worker is recovery: no budget needed", given: func(s *story) { s.start(0).failWith(1, domain.ClassWorkerLost, 0, time.Second) },
			now: 3 * time.Second, facts: domain.Facts{},
			want: domain.Step{Kind: domain.StepStart, Attempt: 2, Timeout: 10 * time.Second, Provider: domain.DefaultProvider}},
		{name: "retry after a shutdown is recovery", given: func(s *story) { s.start(0).failWith(1, domain.ClassCancelled, 0, time.Second) },
			now: 3 * time.Second, facts: domain.Facts{},
			want: domain.Step{Kind: domain.StepStart, Attempt: 2, Timeout: 10 * time.Second, Provider: domain.DefaultProvider}},
		{name: "retry after the store was unavailable is recovery", given: func(s *story) { s.start(0).failWith(1, domain.ClassStoreUnavailable, 0, time.Second) },
			now: 3 * time.Second, facts: domain.Facts{},
			want: domain.Step{Kind: domain.StepStart, Attempt: 2, Timeout: 10 * time.Second, Provider: domain.DefaultProvider}},
		{name: "retry near the deadline: timeout is what remains", given: func(s *story) { s.start(0).failWith(1, domain.ClassTransportError, 0, 24*time.Second) },
			now: 26 * time.Second, facts: allowed,
			want: domain.Step{Kind: domain.StepStart, Attempt: 2, Timeout: 4 * time.Second, Retry: true, Provider: domain.DefaultProvider}},
		{name: "Retry-After reaching the deadline: budget exhausted", given: func(s *story) { s.start(0).failWith(1, domain.ClassRateLimited, 30*time.Second, time.Second) },
			now: time.Second, facts: allowed,
			want: domain.Step{Kind: domain.StepEscalate, Reason: domain.ReasonBudgetExhausted, Detail: "next retry would wait 1s past the deadline"}},
		{name: "provider refused: escalate at once", given: func(s *story) { s.start(0).failWith(1, domain.ClassProviderRefused, 0, time.Second) },
			now: time.Second, facts: allowed,
			want: domain.Step{Kind: domain.StepEscalate, Reason: domain.ReasonProviderRefused, Detail: "scripted"}},
		{name: "provider refused the last attempt: refused, not exhausted", given: func(s *story) {
			s.start(0).timeOut(1, time.Second).start(2*time.Second).timeOut(2, 3*time.Second).start(4*time.Second).failWith(3, domain.ClassProviderRefused, 0, 5*time.Second)
		}, now: 5 * time.Second, facts: allowed,
			want: domain.Step{Kind: domain.StepEscalate, Reason: domain.ReasonProviderRefused, Detail: "scripted"}},
		{name: "every attempt made: attempts exhausted", given: func(s *story) {
			s.start(0).timeOut(1, time.Second).start(2*time.Second).timeOut(2, 3*time.Second).start(4*time.Second).timeOut(3, 5*time.Second)
		}, now: 5 * time.Second, facts: allowed,
			want: domain.Step{Kind: domain.StepEscalate, Reason: domain.ReasonAttemptsExhausted, Detail: "3 of 3 attempts made"}},
		{name: "deadline passed between attempts: budget exhausted", given: func(s *story) { s.start(0).timeOut(1, 10*time.Second) },
			now: 31 * time.Second, facts: allowed,
			want: domain.Step{Kind: domain.StepEscalate, Reason: domain.ReasonBudgetExhausted, Detail: "the deadline passed"}},
		{name: "deadline passed, the sweeper asks: deadline passed", given: func(s *story) { s.start(0).timeOut(1, 10*time.Second) },
			now: 31 * time.Second, facts: domain.Facts{RetryAllowed: true, Sweep: true},
			want: domain.Step{Kind: domain.StepEscalate, Reason: domain.ReasonDeadlinePassed, Detail: "escalated by the deadline sweeper"}},
		{name: "the sweeper finds a lost attempt: close it first", given: func(s *story) { s.start(0) },
			now: 31 * time.Second, facts: domain.Facts{Sweep: true},
			want: domain.Step{Kind: domain.StepClose, Attempt: 1, Classification: domain.ClassWorkerLost, Detail: "its owner stopped renewing the lease"}},
		{name: "the sweeper before the deadline: the usual step", given: func(s *story) { s.start(0).timeOut(1, 10*time.Second) },
			now: 12 * time.Second, facts: domain.Facts{RetryAllowed: true, Sweep: true},
			want: domain.Step{Kind: domain.StepStart, Attempt: 2, Timeout: 10 * time.Second, Retry: true, Provider: domain.DefaultProvider}},
		{name: "payload missing: escalate", now: 0, facts: domain.Facts{RetryAllowed: true, PayloadMissing: true},
			want: domain.Step{Kind: domain.StepEscalate, Reason: domain.ReasonPayloadMissing, Detail: "content not stored"}},
		{name: "a wait that reaches the deadline is not made", policy: short, given: func(s *story) { s.start(0).failWith(1, domain.ClassTransportError, 0, 1950*time.Millisecond) },
			now: 1950 * time.Millisecond, facts: allowed,
			want: domain.Step{Kind: domain.StepEscalate, Reason: domain.ReasonBudgetExhausted, Detail: "next retry would wait " + (1950*time.Millisecond + backoff(1) - 2*time.Second).Round(time.Millisecond).String() + " past the deadline"}},
	}
	seen := map[string]bool{}
	kinds := map[domain.StepKind]bool{}
	for _, tc := range cases {
		if seen[tc.name] {
			t.Fatalf("duplicate case %q", tc.name)
		}
		seen[tc.name] = true
		kinds[tc.want.Kind] = true
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
			got := domain.Next(s.review, at(tc.now), tc.facts)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Next =\n %+v\nwant\n %+v", got, tc.want)
			}
			if !reflect.DeepEqual(before, s.review) {
				t.Fatal("Next changed the review")
			}
			// The step is carried out by its events, which apply.
			events, err := s.review.EventsFor(got, at(tc.now))
			if err != nil {
				t.Fatalf("EventsFor(%+v): %v", got, err)
			}
			if want := got.Kind == domain.StepStart || got.Kind == domain.StepClose || got.Kind == domain.StepEscalate; want != (len(events) == 1) {
				t.Fatalf("EventsFor(%s) = %v", got.Kind, types(events))
			}
			s.apply(events...)
			if st, ok := firstStarted(events); ok && (st.Attempt != got.Attempt || st.AttemptTimeoutMS != got.Timeout.Milliseconds()) {
				t.Errorf("AttemptStarted %+v does not match the step %+v", st, got)
			}
		})
	}
	for _, k := range []domain.StepKind{domain.StepNone, domain.StepStart, domain.StepWait, domain.StepClose, domain.StepEscalate} {
		if !kinds[k] {
			t.Errorf("no case answers %s", k)
		}
	}
}

func firstStarted(events []domain.Event) (domain.AttemptStarted, bool) {
	for _, e := range events {
		if st, ok := e.(domain.AttemptStarted); ok {
			return st, true
		}
	}
	return domain.AttemptStarted{}, false
}

// The jitter of a retry is a function of the review and the attempt: the
// same in every process, different across reviews.
func TestJitterSource(t *testing.T) {
	t.Parallel()
	b := domain.Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Jitter: 75 * time.Millisecond}
	first, again := b.Delay(1, domain.JitterSource("a", 1)), b.Delay(1, domain.JitterSource("a", 1))
	if first != again {
		t.Fatal("the same review and attempt drew two jitters")
	}
	seen := map[time.Duration]bool{}
	for i := range 200 {
		d := b.Delay(1, domain.JitterSource("rev-"+strings.Repeat("x", i%7)+string(rune('a'+i%26))+string(rune('a'+i/26)), 1))
		if d < 100*time.Millisecond || d >= 175*time.Millisecond {
			t.Fatalf("delay %s outside [100ms, 175ms)", d)
		}
		seen[d] = true
	}
	if len(seen) < 50 {
		t.Errorf("200 reviews drew only %d distinct jitters", len(seen))
	}
}

// Each way an attempt can end, by name.
func TestConclude(t *testing.T) {
	t.Parallel()
	accept := &domain.Finding{ReviewID: testID, State: domain.DecisionAccepted, Reasons: []string{"ok"}}
	cases := []struct {
		name     string
		policy   domain.ClassPolicy
		given    func(s *story)
		attempt  int
		answer   domain.Answer
		now      time.Duration
		want     []string
		class    domain.Classification
		conflict domain.ConflictReason
	}{
		{name: "finding in time", given: func(s *story) { s.start(0) }, attempt: 1, answer: domain.Answer{Finding: accept},
			now: time.Second, want: []string{"FindingReceived"}},
		{name: "accept on a gated class is held", policy: gated(), given: func(s *story) { s.start(0) }, attempt: 1,
			answer: domain.Answer{Finding: accept}, now: time.Second, want: []string{"FindingReceived", "Escalated"}},
		{name: "finding for another review is invalid", given: func(s *story) { s.start(0) }, attempt: 1,
			answer: domain.Answer{Finding: &domain.Finding{ReviewID: "other", State: domain.DecisionAccepted}, Failure: domain.AttemptFailure{Detail: "http 200"}},
			now:    time.Second, want: []string{"AttemptTimedOut"}, class: domain.ClassInvalidFinding},
		{name: "finding without a state is invalid", given: func(s *story) { s.start(0) }, attempt: 1,
			answer: domain.Answer{Finding: &domain.Finding{ReviewID: testID}}, now: time.Second, want: []string{"AttemptTimedOut"}, class: domain.ClassInvalidFinding},
		{name: "finding after the timeout is refused and the attempt closed", given: func(s *story) { s.start(0) }, attempt: 1,
			answer: domain.Answer{Finding: accept}, now: 11 * time.Second, want: []string{"AttemptTimedOut"}, class: domain.ClassDeadlineExceeded,
			conflict: domain.ConflictAttemptNotInFlight},
		{name: "finding for a closed attempt is refused alone", given: func(s *story) { s.start(0).timeOut(1, time.Second) }, attempt: 1,
			answer: domain.Answer{Finding: accept}, now: 2 * time.Second, conflict: domain.ConflictAttemptNotInFlight},
		{name: "finding after escalation is refused alone", given: func(s *story) { s.start(0).escalate(domain.ReasonCancelled, time.Second) }, attempt: 1,
			answer: domain.Answer{Finding: accept}, now: 2 * time.Second, conflict: domain.ConflictReviewMovedOn},
		{name: "failure closes the attempt", given: func(s *story) { s.start(0) }, attempt: 1,
			answer: domain.Answer{Failure: domain.AttemptFailure{Classification: domain.ClassRateLimited, RetryAfter: time.Second}},
			now:    time.Second, want: []string{"AttemptTimedOut"}, class: domain.ClassRateLimited},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := tc.policy
			if p.MaxAttempts == 0 {
				p = automated()
			}
			s := newStory(t, p)
			tc.given(s)
			events, refused, err := s.review.Conclude(tc.attempt, tc.answer, at(tc.now))
			if err != nil {
				t.Fatal(err)
			}
			if got := types(events); !reflect.DeepEqual(got, tc.want) && (len(got) > 0 || len(tc.want) > 0) {
				t.Fatalf("events %v, want %v", got, tc.want)
			}
			s.apply(events...)
			if tc.class != "" {
				if lf := s.review.LastFailure(); lf.Classification != tc.class || lf.Attempt != tc.attempt {
					t.Errorf("last failure %+v, want attempt %d %s", lf, tc.attempt, tc.class)
				}
			}
			switch {
			case tc.conflict == "" && refused != nil:
				t.Errorf("refused %+v, want none", refused)
			case tc.conflict != "" && (refused == nil || refused.Reason != tc.conflict || refused.Attempt != tc.attempt):
				t.Errorf("refused %+v, want %s", refused, tc.conflict)
			}
		})
	}
}
