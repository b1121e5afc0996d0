package engine

import (
	"context"
	"log/slog"
	"time"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

// recorded logs and counts events just written for review r (as it stands
// after them): each attempt's end, each escalation, the review leaving the
// automated path. Logs carry review_id, attempt, elapsed_ms, outcome,
// remaining_budget_ms and final_state, never content.
func (e *Engine) recorded(r *domain.Review, events []domain.Event, now time.Time, actor ledger.Actor) {
	remaining := max(0, r.Remaining(now).Milliseconds())
	for _, ev := range events {
		switch ev := ev.(type) {
		case domain.AttemptTimedOut:
			e.metrics.attempts.WithLabelValues(string(ev.Classification)).Inc()
			e.log.Info("attempt ended", "review_id", r.ID(), "attempt", ev.Attempt, "outcome", string(ev.Classification),
				"elapsed_ms", ev.ElapsedMS, "remaining_budget_ms", remaining, "detail", ev.Detail)
		case domain.FindingReceived:
			outcome := "finding"
			if ev.Source == domain.SourceCallback {
				outcome = "finding_callback"
			}
			e.metrics.attempts.WithLabelValues(outcome).Inc()
			if e.log.Enabled(context.Background(), slog.LevelDebug) { // the arguments cost allocations even when not logged
				e.log.Debug("attempt ended", "review_id", r.ID(), "attempt", ev.Attempt, "outcome", outcome,
					"elapsed_ms", ev.ElapsedMS, "remaining_budget_ms", remaining)
			}
		case domain.Escalated:
			e.metrics.escalations.WithLabelValues(string(ev.Reason)).Inc()
			switch ev.Reason {
			case domain.ReasonBudgetExhausted, domain.ReasonDeadlinePassed:
				e.metrics.budgetExhausted.WithLabelValues(r.Class()).Inc()
			}
			if ev.Reason == domain.ReasonDeadlinePassed {
				e.metrics.swept.Inc()
			}
			e.log.Info("review escalated", "review_id", r.ID(), "attempt", ev.Attempts, "outcome", "escalated",
				"reason", string(ev.Reason), "elapsed_ms", now.Sub(r.SubmittedAt()).Milliseconds(),
				"remaining_budget_ms", remaining, "actor", actor.Name)
		}
	}
	if len(events) > 0 && r.State() != domain.StatePending && e.log.Enabled(context.Background(), slog.LevelDebug) {
		e.log.Debug("review finished", "review_id", r.ID(), "attempt", r.Attempts(), "final_state", string(r.State()),
			"elapsed_ms", now.Sub(r.SubmittedAt()).Milliseconds(), "remaining_budget_ms", remaining)
	}
}

// finish notes a job whose review left the automated path here.
func (e *Engine) finish(*job) { e.metrics.finished.Inc() }
