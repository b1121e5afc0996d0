package engine

import (
	"context"
	"errors"

	"github.com/reviewledger/reviewledger/api/engine/provider"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

// shadowActor records shadow observations in the ledger.
var shadowActor = ledger.Actor{Name: "shadow"}

// errShadowTimeout cancels a shadow call whose timeout passed.
var errShadowTimeout = errors.New("shadow call timed out")

// shadow sends the review of j, whose first attempt is starting, to each
// shadow provider that attempt records (AttemptStarted.Shadows: the
// class's when the decider started it). A shadow never blocks the review: each
// call runs on its own, in one of its provider's shadow slots, and is
// skipped (counted in shadow_calls_total as skipped) when they are all
// taken; it never decides, never touches the review's stream, its budget
// or its attempts. Its answer is recorded in the review's shadow stream.
func (e *Engine) shadow(j *job, content []byte) {
	snap := j.snap
	for _, name := range snap.InFlightShadows() {
		u := e.upstreams[name]
		if u == nil {
			continue // refused at start; a policy reload cannot add one
		}
		select {
		case u.shadows <- struct{}{}:
		default:
			e.metrics.shadowCalls.WithLabelValues(u.label, "skipped").Inc()
			continue
		}
		review := snap.Clone()
		e.shadowing.Go(func() {
			defer func() { <-u.shadows }()
			e.callShadow(u, review, j.id, content)
		})
	}
}

// callShadow makes one shadow call under the shadow's timeout (its
// provider's, else the class's attempt timeout) and records what it came
// to. A stopping engine cancels it and records nothing.
func (e *Engine) callShadow(u *upstream, review *domain.Review, id string, content []byte) {
	timeout := cmp0(u.cfg.Timeout, review.Policy().AttemptTimeout)
	ctx, cancel := context.WithCancelCause(e.stopping)
	defer cancel(nil)
	stop := e.clock.AfterFunc(timeout, func() { cancel(errShadowTimeout) })
	defer stop()
	started := e.clock.Now()
	res := u.cfg.Provider.Call(ctx, provider.Request{
		ReviewID: id, Attempt: 1, ContentClass: review.Class(), ContentType: review.ContentType(),
		Content: content, Timeout: timeout,
	})
	cause := context.Cause(ctx)
	if errors.Is(cause, ErrShutdown) {
		return
	}
	r := shadowResult(res, cause)
	r.Provider, r.StartedAt, r.Took = u.name, started, e.clock.Now().Sub(started)
	e.metrics.shadowCalls.WithLabelValues(u.label, string(r.Outcome)).Inc()
	ev, err := review.ObserveShadow(r)
	if err == nil {
		wctx, done := context.WithTimeout(context.WithoutCancel(e.stopping), e.cfg.StopTimeout)
		defer done()
		err = e.ledger.RecordShadow(wctx, ev, shadowActor)
	}
	if err != nil {
		e.log.Warn("shadow observation not recorded", "review_id", id, "provider", u.name, "error", err.Error())
	}
}

// shadowResult is what a shadow's call result means: a finding with a
// valid state, a timeout (its own timeout passed, or the provider's
// deadline_exceeded), or an error; an asynchronous acknowledgement is an
// error, a shadow's answer being its response.
func shadowResult(res provider.Result, cause error) domain.ShadowResult {
	switch {
	case res.Outcome == provider.OutcomeFinding && res.Finding.State.Valid():
		return domain.ShadowResult{Outcome: domain.ShadowFinding, State: res.Finding.State, Reasons: res.Finding.Reasons}
	case errors.Is(cause, errShadowTimeout), res.Classification == domain.ClassDeadlineExceeded:
		return domain.ShadowResult{Outcome: domain.ShadowTimeout, Classification: domain.ClassDeadlineExceeded, Detail: "no answer before the shadow's timeout"}
	case res.Outcome == provider.OutcomeAccepted:
		return domain.ShadowResult{Outcome: domain.ShadowError, Classification: domain.ClassInvalidFinding, Detail: "answered asynchronously; a shadow must answer in its response"}
	case res.Outcome == provider.OutcomeFinding:
		return domain.ShadowResult{Outcome: domain.ShadowError, Classification: domain.ClassInvalidFinding, Detail: "finding without a valid state"}
	}
	return domain.ShadowResult{Outcome: domain.ShadowError, Classification: res.Classification, Detail: res.Detail}
}
