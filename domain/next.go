package domain

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"
	"time"
)

// StepKind names what a review needs next on its automated path.
type StepKind int

const (
	// StepNone: the review is not pending; nothing is left to do and its
	// work record can go.
	StepNone StepKind = iota
	// StepStart: start attempt Attempt with timeout Timeout.
	StepStart
	// StepWait: nothing to do before Until (a backoff, a provider's
	// Retry-After, or a callback that may still come).
	StepWait
	// StepClose: close the attempt in flight, Attempt, as Classification.
	StepClose
	// StepEscalate: end the automated path for Reason.
	StepEscalate
)

func (k StepKind) String() string {
	switch k {
	case StepNone:
		return "none"
	case StepStart:
		return "start"
	case StepWait:
		return "wait"
	case StepClose:
		return "close"
	case StepEscalate:
		return "escalate"
	}
	return fmt.Sprintf("step(%d)", int(k))
}

// Step is the decider's answer: the one thing a pending review needs next.
type Step struct {
	Kind           StepKind
	Attempt        int              // StepStart, StepClose
	Timeout        time.Duration    // StepStart: min(attempt_timeout, remaining), whole milliseconds
	Until          time.Time        // StepWait
	Classification Classification   // StepClose
	Reason         EscalationReason // StepEscalate
	Detail         string           // StepClose, StepEscalate: why, recorded in the event
	// Retry marks a StepStart the retry budget of its provider counts: a
	// retry after a provider failure, not a first attempt nor the recovery
	// of an attempt lost to our own infrastructure.
	Retry bool
	// Provider is the provider a StepStart's attempt goes to, one of the
	// class's route (ClassPolicy.Route).
	Provider string
	// Shadows are the shadow providers a StepStart's attempt is also sent
	// to: the class's (Facts.Shadows) on a review's first attempt, none on
	// any other.
	Shadows []string
}

// Facts are what the decider cannot read from a review's events: what the
// engine knows about the world around it.
type Facts struct {
	// RetryAllowed: the retry budgets have room for one more retry now.
	// False stands for every provider's budget spent.
	RetryAllowed bool
	// BudgetSpent names the providers whose retry budget refused this
	// retry; a retry goes to another provider of the route, if one is left.
	BudgetSpent []string
	// Open names the providers whose circuit breaker is open: passed over
	// while another provider of the route is not.
	Open []string
	// Route is the class's providers in force, primary first
	// (ClassPolicy.Route); empty stands for the default provider alone. It
	// is configuration, not part of a review's record: a fallback added in
	// an outage serves the reviews already pending.
	Route []string
	// Shadows are the class's shadow providers in force
	// (ClassPolicy.Shadows): a review's first attempt records them, the
	// providers it is also sent to for comparison.
	Shadows []string
	// PayloadMissing: the review's content is not stored (purged, or lost
	// to a crash), so nothing can be sent to the provider.
	PayloadMissing bool
	// Awaiting is the attempt whose provider accepted it for asynchronous
	// review (202): its finding may come by callback until the attempt's
	// timeout. 0 when none.
	Awaiting int
	// Sweep: the deadline sweeper asks. A review past its deadline is
	// escalated as deadline_passed rather than budget_exhausted.
	Sweep bool
}

// Next is the decider of the automated path: given a review, the time and
// the facts the engine gathered, it returns the one step the review needs
// next. It is pure: the same review, time and facts give the same step,
// whichever process asks, so a review parked by one process can be woken
// by another. Waits are measured from when the last attempt ended (never
// from when the question is asked), and backoff jitter is drawn from the
// review's ID and attempt number (JitterSource).
//
// Next never answers StepClose for an attempt whose call is still being
// made: the engine asks only about reviews it holds the lease of, and a
// lease is taken only once the previous owner's has expired (its calls are
// cancelled before then). An attempt in flight that is not Facts.Awaiting
// is therefore lost with its owner.
func Next(r *Review, now time.Time, f Facts) Step {
	if !r.exists || r.state != StatePending {
		return Step{Kind: StepNone}
	}
	if n := r.inFlight; n != 0 {
		end := r.inFlightStarted.Add(r.inFlightTimeout)
		switch {
		case f.Awaiting != n:
			return Step{Kind: StepClose, Attempt: n, Classification: ClassWorkerLost, Detail: "its owner stopped renewing the lease"}
		case now.Before(end):
			return Step{Kind: StepWait, Until: end}
		}
		return Step{Kind: StepClose, Attempt: n, Classification: ClassDeadlineExceeded, Detail: "no callback before the attempt timeout"}
	}
	last := r.lastFailure
	past := !now.Before(r.deadline)
	switch {
	case last.Attempt != 0 && last.Attempt == r.attempts && !last.Classification.Retryable():
		return escalate(ReasonProviderRefused, last.Detail)
	case past && f.Sweep:
		return escalate(ReasonDeadlinePassed, "escalated by the deadline sweeper")
	case r.RoundAttempts() >= r.policy.MaxAttempts:
		return escalate(ReasonAttemptsExhausted, r.attemptsMade())
	case past:
		return escalate(ReasonBudgetExhausted, "the deadline passed")
	case f.PayloadMissing:
		return escalate(ReasonPayloadMissing, "content not stored")
	case r.RoundAttempts() == 0:
		// A round's first attempt (the first of all, or the first after a
		// requeue) is not a retry: the retry budget does not count it.
		provider, _, _ := r.pick(f, false)
		s := r.start(now, false, provider)
		if s.Kind == StepStart && r.attempts == 0 && len(f.Shadows) > 0 {
			s.Shadows = slices.Clone(f.Shadows)
		}
		return s
	}
	retry := !last.Classification.Recovery()
	provider, fresh, ok := r.pick(f, retry)
	if !ok {
		return escalate(ReasonRetryBudgetExhausted, "retries over the provider's share of recent attempts")
	}
	// A failover to a provider the round has not tried owes no backoff:
	// the wait, and a Retry-After, are the failed provider's.
	var wait time.Duration
	if !fresh {
		wait = max(r.policy.Backoff.Delay(r.RoundAttempts(), JitterSource(r.id, r.attempts)), last.RetryAfter)
	}
	retryAt := last.At.Add(wait)
	switch {
	case !retryAt.Before(r.deadline):
		return escalate(ReasonBudgetExhausted, fmt.Sprintf("next retry would wait %s past the deadline", retryAt.Sub(r.deadline).Round(time.Millisecond)))
	case now.Before(retryAt):
		return Step{Kind: StepWait, Until: retryAt}
	}
	return r.start(now, retry, provider)
}

// attemptsMade is the detail of an attempts_exhausted escalation.
func (r *Review) attemptsMade() string {
	if r.round > 1 {
		return fmt.Sprintf("%d of %d attempts made in round %d", r.RoundAttempts(), r.policy.MaxAttempts, r.round)
	}
	return fmt.Sprintf("%d of %d attempts made", r.attempts, r.policy.MaxAttempts)
}

func (r *Review) start(now time.Time, retry bool, provider string) Step {
	// The ledger records the timeout in whole milliseconds; an attempt with
	// less than one left could never be answered in time.
	timeout := AttemptTimeout(r.policy.AttemptTimeout, now, r.deadline).Truncate(time.Millisecond)
	if timeout <= 0 {
		return escalate(ReasonBudgetExhausted, "no time left for an attempt")
	}
	return Step{Kind: StepStart, Attempt: r.attempts + 1, Timeout: timeout, Retry: retry, Provider: provider}
}

func escalate(reason EscalationReason, detail string) Step {
	return Step{Kind: StepEscalate, Reason: reason, Detail: detail}
}

// EventsFor returns the events that carry out a step that is a change of
// the ledger (StepStart, StepClose, StepEscalate); none for StepWait and
// StepNone. The errors are those of StartAttempt, TimeOutAttempt and
// Escalate.
func (r *Review) EventsFor(s Step, now time.Time) ([]Event, error) {
	switch s.Kind {
	case StepStart:
		ev, err := r.StartAttempt(now)
		if s.Provider != DefaultProvider {
			ev.Provider = s.Provider
		}
		ev.Shadows = s.Shadows
		return one(ev, err)
	case StepClose:
		return one(r.TimeOutAttempt(AttemptFailure{Attempt: s.Attempt, Classification: s.Classification, Detail: s.Detail}, now))
	case StepEscalate:
		return one(r.Escalate(s.Reason, s.Detail, now))
	}
	return nil, nil
}

func one[E Event](e E, err error) ([]Event, error) {
	if err != nil {
		return nil, err
	}
	return []Event{e}, nil
}

// JitterSource is the jitter of a review's retry after attempt n: a value
// drawn from the review ID and attempt number, the same in every process
// and on every replay, and spread across reviews so that reviews failing
// together do not retry together.
func JitterSource(reviewID string, attempt int) Rand {
	h := fnv.New64a()
	h.Write([]byte(reviewID))
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(attempt))
	h.Write(n[:])
	return hashRand(mix64(h.Sum64()))
}

type hashRand uint64

func (h hashRand) Int64N(n int64) int64 { return int64(uint64(h) % uint64(n)) }

// mix64 is SplitMix64's finaliser: every input bit affects every output bit.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}
