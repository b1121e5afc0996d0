package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/reviewledger/reviewledger/api/engine/work"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

// Requeue appends a moderator's Requeued event to the review, expecting
// it at snap's version, with the review's work record written again in
// the same write (due now, the new round's deadline), and makes the
// review known to the workers: it is worked as a new round like a fresh
// submission. The event is what snap.Requeue returned.
//
// Errors: those of the append (eventstore.ErrWrongExpectedVersion when the
// review moved on meanwhile).
func (e *Engine) Requeue(ctx context.Context, snap *ledger.Snapshot, ev domain.Requeued, by ledger.Actor) (*ledger.Snapshot, error) {
	next, _, err := e.commands.Run(ctx, ev.ReviewID, snap, by, func(_ *ledger.Snapshot, now time.Time) (ledger.Step, error) {
		change := work.Change{Op: work.Reopen, ReviewID: ev.ReviewID, Deadline: ev.Deadline, At: now}
		return ledger.Step{Events: []domain.Event{ev}, Work: &change}, nil
	})
	if err != nil {
		return nil, fmt.Errorf("requeue %s: %w", ev.ReviewID, err)
	}
	e.outstanding.created()
	e.metrics.requeued.WithLabelValues(snap.Class()).Inc()
	e.log.InfoContext(ctx, "review requeued", "review_id", ev.ReviewID, "round", ev.Round, "by", ev.By,
		"remaining_budget_ms", ev.BudgetMS)
	e.dispatch(ctx, ev.ReviewID)
	return next, nil
}
