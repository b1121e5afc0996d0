package domain_test

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/domain"
)

// step asks Next and carries out a StepStart, as the engine does; it
// returns the step.
func (s *story) step(now time.Duration, f domain.Facts) domain.Step {
	s.tb.Helper()
	st := domain.Next(s.review, at(now), f)
	events, err := s.review.EventsFor(st, at(now))
	if err != nil {
		s.tb.Fatalf("EventsFor %s: %v", st.Kind, err)
	}
	s.apply(events...)
	return st
}

var twoProviders = []string{"managed", "selfhosted"}

func withShadows(s domain.Step, shadows ...string) domain.Step { s.Shadows = shadows; return s }

// The failover rules of Next, by name (docs/domain-tests.md lists them).
func TestNextFailover(t *testing.T) {
	t.Parallel()
	route := func(f domain.Facts) domain.Facts { f.Route = twoProviders; f.RetryAllowed = true; return f }
	start := func(attempt int, retry bool, provider string) domain.Step {
		return domain.Step{Kind: domain.StepStart, Attempt: attempt, Timeout: 10 * time.Second, Retry: retry, Provider: provider}
	}
	cases := []struct {
		name  string
		given func(s *story)
		now   time.Duration
		facts domain.Facts
		want  domain.Step
	}{
		{name: "first attempt goes to the primary", now: 0, facts: route(domain.Facts{}), want: start(1, false, "managed")},
		{name: "primary's circuit open: first attempt to the fallback", now: 0,
			facts: route(domain.Facts{Open: []string{"managed"}}), want: start(1, false, "selfhosted")},
		{name: "every circuit open: the primary is probed", now: 0,
			facts: route(domain.Facts{Open: twoProviders}), want: start(1, false, "managed")},
		{name: "primary timed out: the fallback at once, no backoff", given: func(s *story) {
			s.step(0, route(domain.Facts{}))
			s.failWith(1, domain.ClassDeadlineExceeded, 0, 10*time.Second)
		}, now: 10 * time.Second, facts: route(domain.Facts{}), want: start(2, true, "selfhosted")},
		{name: "the primary's Retry-After does not hold back the fallback", given: func(s *story) {
			s.step(0, route(domain.Facts{}))
			s.failWith(1, domain.ClassRateLimited, 20*time.Second, time.Second)
		}, now: time.Second, facts: route(domain.Facts{}), want: start(2, true, "selfhosted")},
		{name: "after a recovery the same provider again", given: func(s *story) {
			s.step(0, route(domain.Facts{}))
			s.failWith(1, domain.ClassWorkerLost, 0, time.Second)
		}, now: 3 * time.Second, facts: route(domain.Facts{}), want: start(2, false, "managed")},
		{name: "fallback failed too: back to the primary after the backoff", given: func(s *story) {
			s.step(0, route(domain.Facts{}))
			s.failWith(1, domain.ClassProviderUnavailable, 0, time.Second)
			s.step(time.Second, route(domain.Facts{}))
			s.failWith(2, domain.ClassTransportError, 0, 2*time.Second)
		}, now: 2 * time.Second, facts: route(domain.Facts{}), want: domain.Step{Kind: domain.StepWait, Until: at(2*time.Second + backoff(2))}},
		{name: "backoff served: the primary retried", given: func(s *story) {
			s.step(0, route(domain.Facts{}))
			s.failWith(1, domain.ClassProviderUnavailable, 0, time.Second)
			s.step(time.Second, route(domain.Facts{}))
			s.failWith(2, domain.ClassTransportError, 0, 2*time.Second)
		}, now: 2*time.Second + backoff(2), facts: route(domain.Facts{}), want: start(3, true, "managed")},
		{name: "fallback's retry budget spent: the primary, after its backoff", given: func(s *story) {
			s.step(0, route(domain.Facts{}))
			s.failWith(1, domain.ClassProviderUnavailable, 0, time.Second)
		}, now: time.Second, facts: route(domain.Facts{BudgetSpent: []string{"selfhosted"}}),
			want: domain.Step{Kind: domain.StepWait, Until: at(time.Second + backoff(1))}},
		{name: "every retry budget spent: escalate", given: func(s *story) {
			s.step(0, route(domain.Facts{}))
			s.failWith(1, domain.ClassProviderUnavailable, 0, time.Second)
		}, now: 5 * time.Second, facts: route(domain.Facts{BudgetSpent: twoProviders}),
			want: domain.Step{Kind: domain.StepEscalate, Reason: domain.ReasonRetryBudgetExhausted, Detail: "retries over the provider's share of recent attempts"}},
		{name: "refused by the primary: escalate, no failover", given: func(s *story) {
			s.step(0, route(domain.Facts{}))
			s.failWith(1, domain.ClassProviderRefused, 0, time.Second)
		}, now: time.Second, facts: route(domain.Facts{}),
			want: domain.Step{Kind: domain.StepEscalate, Reason: domain.ReasonProviderRefused, Detail: "scripted"}},
		{name: "a first attempt records the class's shadows", now: 0,
			facts: route(domain.Facts{Shadows: []string{"candidate"}}),
			want:  withShadows(start(1, false, "managed"), "candidate")},
		{name: "a retry records no shadows", given: func(s *story) {
			s.step(0, route(domain.Facts{Shadows: []string{"candidate"}}))
			s.failWith(1, domain.ClassDeadlineExceeded, 0, 10*time.Second)
		}, now: 10 * time.Second, facts: route(domain.Facts{Shadows: []string{"candidate"}}), want: start(2, true, "selfhosted")},
		{name: "failover counts against the attempts", given: func(s *story) {
			for n := range 3 {
				s.step(time.Duration(n)*5*time.Second, route(domain.Facts{}))
				s.failWith(n+1, domain.ClassDeadlineExceeded, 0, time.Duration(n)*5*time.Second+time.Second)
			}
		}, now: 20 * time.Second, facts: route(domain.Facts{}),
			want: domain.Step{Kind: domain.StepEscalate, Reason: domain.ReasonAttemptsExhausted, Detail: "3 of 3 attempts made"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStory(t, automated())
			if tc.given != nil {
				tc.given(s)
			}
			got := domain.Next(s.review, at(tc.now), tc.facts)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Next =\n %+v\nwant\n %+v", got, tc.want)
			}
			evs, err := s.review.EventsFor(got, at(tc.now))
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range evs {
				if a, ok := e.(domain.AttemptStarted); ok && (a.ProviderName() != tc.want.Provider || !slices.Equal(a.Shadows, tc.want.Shadows)) {
					t.Fatalf("AttemptStarted provider %q shadows %q, want %q and %q", a.ProviderName(), a.Shadows, tc.want.Provider, tc.want.Shadows)
				}
			}
		})
	}
}

// Whatever the providers answer and whichever circuits are open, every
// attempt goes to a provider of the route, no more attempts are made than
// the policy allows and none after the deadline, and an attempt after a
// failure that counts against a provider goes to another one whenever
// another's circuit is closed.
func TestFailoverProperties(t *testing.T) {
	t.Parallel()
	failures := []domain.Classification{domain.ClassDeadlineExceeded, domain.ClassTransportError,
		domain.ClassProviderUnavailable, domain.ClassRateLimited, domain.ClassInvalidFinding, domain.ClassWorkerLost, domain.ClassStoreUnavailable}
	routes := [][]string{{"a"}, {"a", "b"}, {"a", "b", "c"}}
	for seed := range uint64(500) {
		rng := rand.New(rand.NewPCG(seed, 28))
		route := routes[rng.IntN(len(routes))]
		p := automated()
		p.MaxAttempts = 1 + rng.IntN(5)
		s := newStory(t, p)
		now := time.Duration(0)
		var last domain.Failure
		for range 20 {
			var open []string
			for _, name := range route {
				if rng.IntN(3) == 0 {
					open = append(open, name)
				}
			}
			f := domain.Facts{Route: route, Open: open, RetryAllowed: true}
			st := domain.Next(s.review, at(now), f)
			if st.Kind == domain.StepWait {
				now = st.Until.Sub(t0)
				continue
			}
			if st.Kind != domain.StepStart {
				break
			}
			switch {
			case !slices.Contains(route, st.Provider):
				t.Fatalf("seed %d: attempt %d to %q, not in the route %v", seed, st.Attempt, st.Provider, route)
			case st.Attempt > p.MaxAttempts:
				t.Fatalf("seed %d: attempt %d of %d allowed", seed, st.Attempt, p.MaxAttempts)
			case !at(now).Before(s.review.Deadline()):
				t.Fatalf("seed %d: attempt %d at the deadline", seed, st.Attempt)
			}
			closedOther := slices.ContainsFunc(route, func(n string) bool { return n != last.Provider && !slices.Contains(open, n) })
			if last.Attempt != 0 && !last.Classification.Recovery() && closedOther && st.Provider == last.Provider {
				t.Fatalf("seed %d: attempt %d to %q again after its %s, with another provider closed (open %v)",
					seed, st.Attempt, st.Provider, last.Classification, open)
			}
			s.step(now, f)
			now += time.Duration(rng.IntN(3000)) * time.Millisecond
			s.failWith(st.Attempt, failures[rng.IntN(len(failures))], 0, now)
			last = s.review.LastFailure()
			if last.Provider != st.Provider {
				t.Fatalf("seed %d: failure of attempt %d recorded for %q, sent to %q", seed, st.Attempt, last.Provider, st.Provider)
			}
		}
	}
}
