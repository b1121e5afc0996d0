package runner

import (
	"context"
	"errors"
	"fmt"

	"github.com/reviewledger/reviewledger/api/provider"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore"
)

const sweepBatch = 500

// Sweep escalates (reason deadline_passed) every pending review whose
// deadline passed more than SweepGrace ago, and clears the pending mark of
// reviews that left pending. An attempt still open then (its worker died
// or stalled: a live worker closes its attempt by the attempt's timeout,
// which is never after the deadline) is first closed as
// AttemptTimedOut{worker_lost}, in the same append as the escalation. It
// races safely with workers: each escalation is appended at the revision
// the sweeper loaded, so whoever appends first wins and the other reloads.
// It returns how many reviews it escalated.
func (s *Service) Sweep(ctx context.Context) (int, error) {
	now := s.clock.Now()
	ids, err := s.state.pending(ctx, now.Add(-s.cfg.SweepGrace), sweepBatch)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, id := range ids {
		escalated, err := s.sweepOne(ctx, id)
		if err != nil {
			if ctx.Err() != nil {
				return n, ctx.Err()
			}
			s.log.Error("sweep review", "review_id", id, "error", err.Error())
			continue
		}
		if escalated {
			n++
		}
	}
	return n, nil
}

func (s *Service) sweepOne(ctx context.Context, id string) (bool, error) {
	for range 3 {
		rv, err := s.ledger.Load(ctx, id)
		if errors.Is(err, domain.ErrReviewNotFound) {
			// Staged by a submission that never created its stream.
			return false, s.state.done(ctx, id)
		}
		if err != nil {
			return false, err
		}
		if rv.State() != domain.StatePending {
			return false, s.finish(ctx, rv)
		}
		now := s.clock.Now()
		if rv.Remaining(now) > 0 {
			return false, nil
		}
		var closed []domain.Event
		attempt, _, _, _ := rv.InFlight()
		if attempt != 0 {
			ev, err := rv.TimeOutAttempt(domain.AttemptFailure{Attempt: attempt, Classification: domain.ClassWorkerLost,
				Detail: "open past the review's deadline; closed by the deadline sweeper"}, now)
			if err != nil {
				return false, err
			}
			closed = append(closed, ev)
		}
		err = s.escalateAfter(ctx, rv, closed, domain.ReasonDeadlinePassed, "escalated by the deadline sweeper", actorSweeper)
		if errors.Is(err, eventstore.ErrWrongExpectedVersion) {
			continue
		}
		if err != nil {
			return false, err
		}
		if len(closed) > 0 {
			s.logAttempt(rv.Review, attempt, string(domain.ClassWorkerLost), closed[0].(domain.AttemptTimedOut).ElapsedMS, now)
		}
		s.metrics.swept.Inc()
		return true, nil
	}
	return false, fmt.Errorf("sweep %q: review kept moving: %w", id, eventstore.ErrWrongExpectedVersion)
}

// PurgePayloads deletes content stored longer than PayloadRetention whose
// review is no longer pending, and webhook IDs older than twice the
// signature tolerance. It returns how many payloads it deleted.
func (s *Service) PurgePayloads(ctx context.Context) (int64, error) {
	now := s.clock.Now()
	n, err := s.state.purgePayloads(ctx, now.Add(-s.cfg.PayloadRetention))
	if err != nil {
		return 0, err
	}
	if err := s.state.purgeWebhooks(ctx, now.Add(-2*provider.SignatureTolerance)); err != nil {
		return n, err
	}
	return n, nil
}

func (s *Service) sweepLoop(ctx context.Context) {
	for {
		if n, err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("deadline sweep", "error", err.Error())
		} else if n > 0 {
			s.log.Info("deadline sweep escalated reviews", "count", n)
		}
		if s.clock.Sleep(ctx, s.cfg.SweepInterval) != nil {
			return
		}
	}
}

func (s *Service) purgeLoop(ctx context.Context) {
	for {
		if n, err := s.PurgePayloads(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("purge payloads", "error", err.Error())
		} else if n > 0 {
			s.log.Info("purged payloads", "count", n)
		}
		if s.clock.Sleep(ctx, s.cfg.PurgeInterval) != nil {
			return
		}
	}
}
