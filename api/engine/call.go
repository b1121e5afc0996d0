package engine

import (
	"context"
	"errors"
	"time"

	"github.com/reviewledger/reviewledger/api/engine/provider"
	"github.com/reviewledger/reviewledger/domain"
)

// Causes a call's context is cancelled with.
var (
	// errAttemptTimeout: the attempt's timeout passed.
	errAttemptTimeout = errors.New("attempt timed out")
	// errLeaseLost: the lease could not be renewed in time, or another
	// process holds the review now. A call never outlives its lease, so
	// that two processes never call the provider for one review at once.
	errLeaseLost = errors.New("lease could not be renewed")
)

// call makes the provider call of the attempt j just started, under the
// attempt's timeout and the lease, and keeps its answer in j for the next
// step to record. It frees j's call slot when it returns.
func (e *Engine) call(j *job) {
	defer e.releaseSlot(j)
	snap := j.snap
	attempt, _, started, timeout := snap.InFlight()
	// The attempt's timeout runs from its recorded start, which a call
	// made late (its start's write learned after a fault) has partly used.
	left := min(timeout, started.Add(timeout).Sub(e.clock.Now()))
	if left <= 0 {
		// Nothing left: not called. The store took the attempt's time, not
		// the provider, so the attempt is closed as the store's failure (a
		// recovery: the retry is not charged to the provider's budget).
		j.answer = &answer{attempt: attempt, at: e.clock.Now(), Answer: domain.Answer{Failure: domain.AttemptFailure{
			Classification: domain.ClassStoreUnavailable, Detail: "not called: its start was recorded after its timeout had passed"}}}
		return
	}
	ctx, cancel := context.WithCancelCause(e.stopping)
	defer cancel(nil)
	stopTimer := e.clock.AfterFunc(left, func() { cancel(errAttemptTimeout) })
	defer stopTimer()
	e.mu.Lock()
	j.cancelCall = cancel
	lost := j.lost
	e.mu.Unlock()
	if lost {
		cancel(errLeaseLost)
	}
	u := e.upstreams[snap.InFlightProvider()]
	if u == nil { // a provider no longer configured: its attempt fails, the next goes elsewhere
		u = &upstream{name: snap.InFlightProvider(), cfg: Upstream{Provider: unconfigured{}}}
	}
	if t := u.cfg.Timeout; t > 0 && t < left {
		stopCap := e.clock.AfterFunc(t, func() { cancel(errAttemptTimeout) })
		defer stopCap()
	}
	if attempt == 1 {
		e.shadow(j, j.payload.Content)
	}
	e.metrics.calls.Inc()
	cctx, span := e.startAttempt(ctx, j, attempt, timeout, u.name)
	res := u.cfg.Provider.Call(cctx, provider.Request{
		ReviewID: j.id, Attempt: attempt, ContentClass: snap.Class(), ContentType: snap.ContentType(),
		Content: j.payload.Content, Timeout: left,
	})
	e.metrics.calls.Dec()
	e.mu.Lock()
	j.cancelCall = nil
	e.mu.Unlock()
	j.answer = answerOf(attempt, res, context.Cause(ctx), e.clock.Now())
	if lostToStore(res, context.Cause(ctx), left, timeout, u.cfg.Timeout) {
		j.answer.Failure = domain.AttemptFailure{Classification: domain.ClassStoreUnavailable,
			Detail: "not sent: its start was recorded late, and the rest of its timeout passed before its request was sent"}
	}
	if j.breakerDone != nil {
		j.breakerDone(breakerOutcome(j.answer))
		j.breakerDone = nil
	}
	e.metrics.providerCalls.WithLabelValues(u.label, j.answer.outcome()).Inc()
	endAttempt(span, j.answer)
}

// lostToStore reports whether an attempt's call was cut off by its
// timeout before its request was sent, having had less than half the time
// it would have had but for the store (its start learned late: left of
// the attempt's timeout, under the upstream's cap when it has one). Such
// an attempt was lost to the store, not to the provider, which never saw
// it: it is closed as store_unavailable, like one with nothing left. A
// request not sent in most of its time is the provider's (or the
// network's) and stays deadline_exceeded.
func lostToStore(res provider.Result, cause error, left, timeout, upstreamCap time.Duration) bool {
	full := timeout
	if upstreamCap > 0 {
		full = min(full, upstreamCap)
	}
	return res.Unsent && res.Outcome == provider.OutcomeFailure && errors.Is(cause, errAttemptTimeout) && min(left, full) < full/2
}

// unconfigured is a provider an attempt was recorded for that this
// process does not have (removed from the policy while the attempt was in
// flight): every call fails, and the decider moves on.
type unconfigured struct{}

func (unconfigured) Call(context.Context, provider.Request) provider.Result {
	return provider.Failure(domain.ClassProviderUnavailable, "provider not configured in this process")
}

// outcome labels the answer in metrics: finding, accepted_async or the
// failure's classification.
func (a *answer) outcome() string {
	switch {
	case a.Finding != nil:
		return provider.OutcomeFinding.String()
	case a.async:
		return provider.OutcomeAccepted.String()
	}
	return string(a.Failure.Classification)
}

// answerOf is what a call's result means. A finding is kept whenever it
// came (Conclude refuses one that came after the attempt's timeout, which
// is counted, unlike a plain timeout); anything else that ends with the
// call's context cancelled is our cancellation, classified by its cause,
// not the provider's failure.
func answerOf(attempt int, res provider.Result, cause error, at time.Time) *answer {
	a := &answer{attempt: attempt, at: at}
	if res.Outcome == provider.OutcomeFinding {
		f := res.Finding
		a.Finding = &f
		a.Failure.Detail = res.Detail
		return a
	}
	switch {
	case errors.Is(cause, errAttemptTimeout) && res.Outcome == provider.OutcomeAccepted:
		a.Failure = domain.AttemptFailure{Classification: domain.ClassDeadlineExceeded, Detail: "no callback before the attempt timeout"}
	case errors.Is(cause, errAttemptTimeout):
		a.Failure = domain.AttemptFailure{Classification: domain.ClassDeadlineExceeded, Detail: "no answer before the attempt timeout"}
	case errors.Is(cause, ErrShutdown):
		a.Failure = domain.AttemptFailure{Classification: domain.ClassCancelled, Detail: ErrShutdown.Error()}
	case errors.Is(cause, errLeaseLost):
		a.Failure = domain.AttemptFailure{Classification: domain.ClassStoreUnavailable, Detail: errLeaseLost.Error()}
	case res.Outcome == provider.OutcomeAccepted:
		a.async = true
	default:
		a.Failure = domain.AttemptFailure{Classification: res.Classification, Detail: res.Detail, RetryAfter: res.RetryAfter}
	}
	return a
}
