package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/reviewledger/reviewledger/api/provider"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

// reasonPayloadMissing escalates a review whose content is gone: nothing
// can be sent to the provider, so a moderator must look at it.
const reasonPayloadMissing domain.EscalationReason = "payload_missing"

var (
	actorRunner  = ledger.Actor{Name: "runner"}
	actorSweeper = ledger.Actor{Name: "sweeper"}
)

// errAttemptTimeout is the cause an attempt's context is cancelled with at
// the attempt's timeout.
var errAttemptTimeout = errors.New("attempt timed out")

// Review works one review until it leaves pending: attempts within the
// deadline, a conditional commit of a finding, or escalation. It returns
// nil when the review is no longer pending (whoever moved it).
//
// Cancelling ctx ends the review in escalation (reason cancelled), except
// when ctx's cause is ErrShutdown: then the review is left pending, an
// attempt of this run closed as cancelled, for the next start to resume,
// and Review returns ErrShutdown.
func (s *Service) Review(ctx context.Context, reviewID string) error {
	s.inFlight.Add(1)
	s.metrics.inFlight.Inc()
	defer func() {
		s.inFlight.Add(-1)
		s.metrics.inFlight.Dec()
	}()
	var (
		retryAfter time.Duration
		pl         *payload
		// lastFailure is how the review's latest attempt ended, when it
		// ended without a finding; resumed runs read it from the history.
		lastFailure domain.Classification
		first       = true
	)
	for {
		rv, err := s.ledger.Load(ctx, reviewID)
		switch {
		case errors.Is(err, domain.ErrReviewNotFound):
			// Staged but not created yet (a submission in progress), or
			// never created: its pending mark is left for the submission
			// or, past its deadline, for the sweeper.
			return nil
		case ctx.Err() != nil:
			return s.interrupted(ctx, reviewID, 0)
		case err != nil:
			return err
		}
		if rv.State() != domain.StatePending {
			return s.finish(ctx, rv)
		}
		now := s.clock.Now()
		if n, _, _, _ := rv.InFlight(); first && n == 0 && rv.Attempts() > 0 {
			if lastFailure, retryAfter, err = s.lastFailure(ctx, reviewID, now); err != nil {
				return s.failed(ctx, reviewID, err)
			}
		}
		first = false
		if n, _, started, timeout := rv.InFlight(); n != 0 {
			// Not this run's attempt: another worker's, or one left by a
			// worker that died. A live worker closes its attempt by its
			// timeout, so only past that (and a grace) is it lost.
			lostAt := started.Add(timeout + s.cfg.LostAttemptGrace)
			if now.Before(lostAt) {
				if err := s.clock.Sleep(ctx, lostAt.Sub(now)); err != nil {
					return s.interrupted(ctx, reviewID, 0)
				}
				continue
			}
			ev, err := rv.TimeOutAttempt(domain.AttemptFailure{Attempt: n, Classification: domain.ClassWorkerLost, Detail: "attempt outlived its timeout"}, now)
			if err != nil {
				return err
			}
			if _, err := s.append(ctx, rv, actorRunner, ev); err != nil {
				if errors.Is(err, eventstore.ErrWrongExpectedVersion) {
					continue
				}
				return s.failed(ctx, reviewID, err)
			}
			s.logAttempt(rv.Review, n, string(domain.ClassWorkerLost), ev.ElapsedMS, now)
			lastFailure, retryAfter = domain.ClassWorkerLost, 0
			continue
		}

		policy := rv.Policy()
		if rv.Attempts() >= policy.MaxAttempts {
			if err := s.escalate(ctx, rv, domain.ReasonAttemptsExhausted, "", actorRunner); err != nil {
				if errors.Is(err, eventstore.ErrWrongExpectedVersion) {
					continue
				}
				return s.failed(ctx, reviewID, err)
			}
			return nil
		}
		if pl == nil {
			got, err := s.state.payload(ctx, reviewID, rv.PayloadDigest())
			switch {
			case errors.Is(err, errPayloadMissing):
				if err := s.escalate(ctx, rv, reasonPayloadMissing, "content not stored", actorRunner); err != nil && !errors.Is(err, eventstore.ErrWrongExpectedVersion) {
					return s.failed(ctx, reviewID, err)
				}
				continue
			case err != nil:
				return s.failed(ctx, reviewID, err)
			}
			pl = &got
		}
		if rv.Attempts() > 0 {
			backoff := policy.Backoff.Delay(rv.Attempts(), s)
			wait, ok := domain.RetryWait(now, rv.Deadline(), backoff, retryAfter)
			if !ok {
				if err := s.escalate(ctx, rv, domain.ReasonBudgetExhausted, fmt.Sprintf("next retry would wait %s past the deadline", max(backoff, retryAfter)), actorRunner); err != nil {
					if errors.Is(err, eventstore.ErrWrongExpectedVersion) {
						continue
					}
					return s.failed(ctx, reviewID, err)
				}
				return nil
			}
			// Retrying an attempt lost with its worker, or stopped by a
			// shutdown, is recovery, not a provider failure: the retry
			// budget neither refuses nor counts it.
			recovery := lastFailure == domain.ClassWorkerLost || lastFailure == domain.ClassCancelled
			if !recovery && !s.budget.allow(now) {
				s.metrics.retryBudgetExhausted.WithLabelValues(s.cfg.ProviderName).Inc()
				if err := s.escalate(ctx, rv, domain.ReasonRetryBudgetExhausted, "retries over "+s.cfg.ProviderName+"'s share of recent attempts", actorRunner); err != nil {
					if errors.Is(err, eventstore.ErrWrongExpectedVersion) {
						continue
					}
					return s.failed(ctx, reviewID, err)
				}
				return nil
			}
			if err := s.clock.Sleep(ctx, wait); err != nil {
				return s.interrupted(ctx, reviewID, 0)
			}
			now = s.clock.Now()
		}
		started, err := rv.StartAttempt(now)
		if errors.Is(err, domain.ErrBudgetExhausted) {
			if err := s.escalate(ctx, rv, domain.ReasonBudgetExhausted, "no time left for an attempt", actorRunner); err != nil {
				if errors.Is(err, eventstore.ErrWrongExpectedVersion) {
					continue
				}
				return s.failed(ctx, reviewID, err)
			}
			return nil
		}
		if err != nil {
			return err
		}
		open, err := s.append(ctx, rv, actorRunner, started)
		if err != nil {
			if errors.Is(err, eventstore.ErrWrongExpectedVersion) {
				continue
			}
			return s.failed(ctx, reviewID, err)
		}
		retry := started.Attempt > 1 && lastFailure != domain.ClassWorkerLost && lastFailure != domain.ClassCancelled
		s.budget.record(now, retry)
		s.metrics.observeBudget(s.budget, now, s.cfg.ProviderName)

		res := s.attempt(ctx, open, started, *pl)
		if ctx.Err() != nil {
			return s.interrupted(ctx, reviewID, started.Attempt)
		}
		retryAfter, lastFailure = res.RetryAfter, res.Classification
		finished, err := s.conclude(ctx, open, started, res)
		if err != nil {
			return s.failed(ctx, reviewID, err)
		}
		if finished {
			return nil
		}
	}
}

// lastFailure reads how a resumed review's latest attempt ended and what
// is left of the provider's Retry-After then.
func (s *Service) lastFailure(ctx context.Context, reviewID string, now time.Time) (domain.Classification, time.Duration, error) {
	hist, err := s.ledger.History(ctx, reviewID)
	if err != nil {
		return "", 0, err
	}
	for i := len(hist.Events) - 1; i >= 0; i-- {
		if ev, ok := hist.Events[i].Event.(domain.AttemptTimedOut); ok {
			until := ev.At.Add(time.Duration(ev.RetryAfterMS) * time.Millisecond)
			return ev.Classification, max(0, until.Sub(now)), nil
		}
	}
	return "", 0, nil
}

// attemptResult is what one attempt came to.
type attemptResult struct {
	provider.Result
	// decided: a callback decided the attempt while it waited.
	decided bool
}

// attempt calls the provider once, under the attempt's timeout. For an
// asynchronous answer (202) it waits for the callback until the timeout.
func (s *Service) attempt(ctx context.Context, open *ledger.Review, st domain.AttemptStarted, pl payload) attemptResult {
	timeout := time.Duration(st.AttemptTimeoutMS) * time.Millisecond
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := s.clock.AfterFunc(timeout, func() { cancel(errAttemptTimeout) })
	defer stop()
	// Registered before the call, so that a callback landing before the
	// provider's 202 does is not missed.
	w := s.waiters.register(open.ID(), st.Attempt)
	defer s.waiters.release(w)

	res := attemptResult{Result: s.cfg.Provider.Review(actx, provider.Request{
		ReviewID: open.ID(), Attempt: st.Attempt, ContentClass: open.Class(), ContentType: open.ContentType(),
		Content: pl.Content, Timeout: timeout,
	})}
	timedOut := func() bool { return errors.Is(context.Cause(actx), errAttemptTimeout) }
	if res.Outcome == provider.OutcomeAccepted {
		select {
		case <-w.done:
			res.decided = true
			return res
		case <-actx.Done():
		}
		if timedOut() {
			res.Result = provider.Failure(domain.ClassDeadlineExceeded, "no callback before the attempt timeout")
		}
		return res
	}
	// A finding that came after the timeout is kept: conclude refuses it
	// as a conflicting completion (domain.Review.RecordFinding checks the
	// time), which is counted, unlike a plain timeout.
	if timedOut() && res.Outcome != provider.OutcomeFinding {
		res.Result = provider.Failure(domain.ClassDeadlineExceeded, "no answer before the attempt timeout")
	}
	return res
}

// conclude records how an attempt ended. finished is true when it ended the
// review's automated path and finished it here (the caller stops without
// loading the review again). A conflicting append is not an error: the
// caller reloads and carries on from whatever moved the review.
func (s *Service) conclude(ctx context.Context, open *ledger.Review, st domain.AttemptStarted, res attemptResult) (finished bool, err error) {
	now := s.clock.Now()
	elapsed := now.Sub(st.StartedAt).Milliseconds()
	if res.decided {
		// Logged and counted by the callback that decided it; the next
		// load finds the review decided and finishes it.
		return false, nil
	}
	if res.Outcome == provider.OutcomeFinding {
		events, err := open.RecordFinding(res.Finding, domain.SourceResponse, now)
		switch {
		case errors.Is(err, domain.ErrInvalidFinding):
			res.Result = provider.Failure(domain.ClassInvalidFinding, res.Detail+": "+invalidReason(res.Finding, open.ID()))
		case errors.Is(err, domain.ErrAttemptNotInFlight), errors.Is(err, domain.ErrNotPending):
			// Arrived after the attempt's timeout: never a decision.
			reason, _ := domain.ConflictReasonOf(err)
			s.conflict(ctx, open.Review, actorRunner, domain.Conflict{Attempt: st.Attempt, Source: domain.SourceResponse,
				Reason: reason, State: res.Finding.State, Detail: "finding after the attempt timeout"})
			res.Result = provider.Failure(domain.ClassDeadlineExceeded, "finding arrived after the attempt timeout")
		case err != nil:
			return false, err
		default:
			done, err := s.append(ctx, open, actorRunner, events...)
			if errors.Is(err, eventstore.ErrWrongExpectedVersion) {
				s.conflict(ctx, s.current(ctx, open.Review), actorRunner, domain.Conflict{Attempt: st.Attempt, Source: domain.SourceResponse,
					Reason: domain.ConflictWrongExpectedVersion, State: res.Finding.State, Detail: "review moved while the attempt ran"})
				return false, nil
			}
			if err != nil {
				return false, err
			}
			s.logAttempt(open.Review, st.Attempt, "finding", elapsed, now)
			if len(events) > 1 {
				s.metrics.escalations.WithLabelValues(string(domain.ReasonHumanGate)).Inc()
			}
			return true, s.finish(ctx, done)
		}
	}
	ev, err := open.TimeOutAttempt(domain.AttemptFailure{
		Attempt: st.Attempt, Classification: res.Classification, Detail: res.Detail, RetryAfter: res.RetryAfter,
	}, now)
	if err != nil {
		return false, err
	}
	events := []domain.Event{ev}
	if !res.Retryable() {
		esc, err := open.Escalate(domain.ReasonProviderRefused, res.Detail, now)
		if err != nil {
			return false, err
		}
		events = append(events, esc)
	}
	done, err := s.append(ctx, open, actorRunner, events...)
	if errors.Is(err, eventstore.ErrWrongExpectedVersion) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	s.logAttempt(open.Review, st.Attempt, string(res.Classification), ev.ElapsedMS, now)
	if len(events) > 1 {
		s.metrics.escalations.WithLabelValues(string(domain.ReasonProviderRefused)).Inc()
		return true, s.finish(ctx, done)
	}
	return false, nil
}

func invalidReason(f domain.Finding, reviewID string) string {
	if f.ReviewID != reviewID {
		return "review_id does not match"
	}
	return "state is neither accepted nor rejected"
}

// escalate ends the automated path of rv. The error matches
// eventstore.ErrWrongExpectedVersion when the review moved meanwhile.
func (s *Service) escalate(ctx context.Context, rv *ledger.Review, reason domain.EscalationReason, detail string, actor ledger.Actor) error {
	return s.escalateAfter(ctx, rv, nil, reason, detail, actor)
}

// escalateAfter appends first (the outcome of an open attempt) and the
// escalation in one append at rv's revision, so both are recorded or
// neither.
func (s *Service) escalateAfter(ctx context.Context, rv *ledger.Review, first []domain.Event, reason domain.EscalationReason, detail string, actor ledger.Actor) error {
	now := s.clock.Now()
	ev, err := rv.Escalate(reason, detail, now)
	if err != nil {
		return err
	}
	done, err := s.append(ctx, rv, actor, append(first, ev)...)
	if err != nil {
		return err
	}
	s.metrics.escalations.WithLabelValues(string(reason)).Inc()
	switch reason {
	case domain.ReasonBudgetExhausted, domain.ReasonDeadlinePassed:
		s.metrics.budgetExhausted.WithLabelValues(rv.Class()).Inc()
	}
	s.log.Info("review escalated", "review_id", rv.ID(), "attempt", rv.Attempts(), "outcome", "escalated",
		"reason", string(reason), "elapsed_ms", now.Sub(rv.SubmittedAt()).Milliseconds(),
		"remaining_budget_ms", max(0, rv.Remaining(now).Milliseconds()), "actor", actor.Name)
	return s.finish(ctx, done)
}

// interrupted handles a review run whose context is done. attempt is the
// attempt this run has in flight, 0 when none.
func (s *Service) interrupted(ctx context.Context, reviewID string, attempt int) error {
	shutdown := errors.Is(context.Cause(ctx), ErrShutdown)
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	for range 3 {
		rv, err := s.ledger.Load(bg, reviewID)
		if err != nil {
			return err
		}
		if rv.State() != domain.StatePending {
			return s.finish(bg, rv)
		}
		now := s.clock.Now()
		var events []domain.Event
		if n, _, _, _ := rv.InFlight(); n != 0 && n == attempt {
			ev, err := rv.TimeOutAttempt(domain.AttemptFailure{Attempt: n, Classification: domain.ClassCancelled, Detail: context.Cause(ctx).Error()}, now)
			if err != nil {
				return err
			}
			events = append(events, ev)
		}
		if !shutdown {
			ev, err := rv.Escalate(domain.ReasonCancelled, context.Cause(ctx).Error(), now)
			if err != nil {
				return err
			}
			events = append(events, ev)
		}
		done, err := s.append(bg, rv, actorRunner, events...)
		if errors.Is(err, eventstore.ErrWrongExpectedVersion) {
			continue
		}
		if err != nil {
			return err
		}
		if attempt != 0 {
			s.logAttempt(rv.Review, attempt, string(domain.ClassCancelled), 0, now)
		}
		if shutdown {
			s.log.Info("review left pending for resume", "review_id", reviewID, "outcome", "shutdown",
				"remaining_budget_ms", max(0, rv.Remaining(now).Milliseconds()))
			return ErrShutdown
		}
		s.metrics.escalations.WithLabelValues(string(domain.ReasonCancelled)).Inc()
		return s.finish(bg, done)
	}
	return fmt.Errorf("review %q: cancelled, and the review kept moving: %w", reviewID, eventstore.ErrWrongExpectedVersion)
}

// failed reports an error of the store or ledger; a done context is an
// interruption, not a failure.
func (s *Service) failed(ctx context.Context, reviewID string, err error) error {
	if ctx.Err() != nil {
		return s.interrupted(ctx, reviewID, 0)
	}
	return err
}

// finish records that a review left the automated path.
func (s *Service) finish(ctx context.Context, rv *ledger.Review) error {
	now := s.clock.Now()
	s.log.Info("review finished", "review_id", rv.ID(), "attempt", rv.Attempts(), "final_state", string(rv.State()),
		"elapsed_ms", now.Sub(rv.SubmittedAt()).Milliseconds(), "remaining_budget_ms", max(0, rv.Remaining(now).Milliseconds()))
	return s.state.done(context.WithoutCancel(ctx), rv.ID())
}

func (s *Service) append(ctx context.Context, rv *ledger.Review, actor ledger.Actor, events ...domain.Event) (*ledger.Review, error) {
	return s.ledger.Append(ctx, rv, actor, events...)
}

func (s *Service) logAttempt(rv *domain.Review, attempt int, outcome string, elapsedMS int64, now time.Time) {
	s.metrics.attempts.WithLabelValues(outcome).Inc()
	s.log.Info("attempt ended", "review_id", rv.ID(), "attempt", attempt, "outcome", outcome,
		"elapsed_ms", elapsedMS, "remaining_budget_ms", max(0, rv.Remaining(now).Milliseconds()))
}

// conflict logs and counts a conflicting completion and records it in the
// review's conflict stream (ConflictingCompletionRecorded), where auditors
// and the SLO read model find it. It changes nothing in the review. rv is
// the review as it stands when the completion is refused.
func (s *Service) conflict(ctx context.Context, rv *domain.Review, actor ledger.Actor, c domain.Conflict) {
	now := s.clock.Now()
	s.metrics.conflicts.WithLabelValues(c.Source).Inc()
	s.log.Warn("conflicting completion", "review_id", rv.ID(), "attempt", c.Attempt, "outcome", "conflicting_completion",
		"source", c.Source, "reason", string(c.Reason), "detail", c.Detail, "remaining_budget_ms", max(0, rv.Remaining(now).Milliseconds()))
	e, err := rv.RecordConflict(c, now)
	if err == nil {
		err = s.ledger.RecordConflict(context.WithoutCancel(ctx), e, actor)
	}
	if err != nil {
		s.log.Error("record conflicting completion", "review_id", rv.ID(), "attempt", c.Attempt, "error", err.Error())
	}
}

// current reloads a review that moved, for the record of a conflict; rv
// when it cannot be read.
func (s *Service) current(ctx context.Context, rv *domain.Review) *domain.Review {
	now, err := s.ledger.Load(context.WithoutCancel(ctx), rv.ID())
	if err != nil {
		return rv
	}
	return now.Review
}
