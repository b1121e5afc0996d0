package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/reviewledger/reviewledger/api/engine/provider"
	"github.com/reviewledger/reviewledger/api/engine/work"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

var actorProvider = ledger.Actor{Name: "provider"}

// HandleCallback verifies a provider's findings callback (Standard
// Webhooks signature, 5-minute tolerance), de-duplicates it by its
// webhook-id for its review, and commits its finding at the revision of the
// attempt's AttemptStarted, with the review's work record released in the
// same write. It works in whichever process the callback lands: the
// review's owner need not be this one, and a review parked waiting for it
// is not held by any.
//
// A callback whose finding is the one the review holds for its attempt
// (domain.Finding.Equal: recorded by a copy of this delivery, by a callback
// under another webhook-id, or by the provider's response), whether it
// arrives with the one that recorded it or later, is answered nil,
// changes nothing and is no conflict.
//
// Errors: provider.ErrInvalidSignature (bad, missing or stale signature),
// domain.ErrReviewNotFound, ErrConflictingCompletion (the attempt is not in
// flight, the review moved on, or the append failed its expected-revision
// check, and the review holds another finding for the attempt or none;
// each recorded as a conflicting completion), domain.ErrInvalidFinding
// (the body is not a complete finding for the review),
// ErrDeliveryInProgress (a copy of a delivery another process is still
// handling, whose outcome did not come within deliveryWait: to be sent
// again). A delivery already applied is answered nil again and changes
// nothing; copies of one delivery arriving at once in one process get the
// first's answer, and a copy arriving in another process while the first
// is handled waits for its outcome: one webhook-id, one final answer.
func (e *Engine) HandleCallback(ctx context.Context, reviewID string, header http.Header, body []byte) error {
	now := e.clock.Now()
	webhookID, by, err := e.verify(header, body, now)
	if err != nil {
		return err
	}
	if err := domain.ValidateReviewID(reviewID); err != nil {
		return fmt.Errorf("review %q: %w", reviewID, domain.ErrReviewNotFound)
	}
	// Copies of one delivery arriving together in this process wait for
	// the first and get its answer: one webhook-id, one answer. The work is
	// not cut short when the first copy's client goes away.
	_, err, _ = e.deliveries.Do(reviewID+"\x00"+webhookID, func() (any, error) {
		return nil, e.deliver(context.WithoutCancel(ctx), webhookID, reviewID, body, by, now)
	})
	return err
}

// verify checks a callback's signature against each provider's secret. by
// names the providers whose secret verified it; nil when every provider
// has the same secret (nothing to tell them apart by).
func (e *Engine) verify(header http.Header, body []byte, now time.Time) (webhookID string, by []string, err error) {
	err = fmt.Errorf("no callback secret configured: %w", provider.ErrInvalidSignature)
	for _, g := range e.signers {
		id, verr := g.signer.Verify(header, body, now)
		if verr != nil {
			err = verr
			continue
		}
		if len(e.signers) > 1 {
			by = g.providers
		}
		return id, by, nil
	}
	return "", nil, err
}

// signerGroup is one callback secret and the providers that sign with it.
type signerGroup struct {
	signer    *provider.Signer
	providers []string
}

// signerGroups groups the providers by their callback signer, in name order.
func signerGroups(ups map[string]*upstream) []signerGroup {
	var groups []signerGroup
	for _, name := range slices.Sorted(maps.Keys(ups)) {
		s := ups[name].cfg.Signer
		if s == nil {
			continue
		}
		i := slices.IndexFunc(groups, func(g signerGroup) bool { return g.signer == s })
		if i < 0 {
			groups = append(groups, signerGroup{signer: s})
			i = len(groups) - 1
		}
		groups[i].providers = append(groups[i].providers, name)
	}
	return groups
}

// deliver applies a verified callback delivery, or answers a redelivery as
// the first was answered.
func (e *Engine) deliver(ctx context.Context, webhookID, reviewID string, body []byte, by []string, now time.Time) error {
	first, outcome, err := e.store.SeeDelivery(ctx, webhookID, reviewID, now)
	if err != nil {
		return err
	}
	if !first {
		return e.redelivered(ctx, webhookID, reviewID, outcome, body, by)
	}
	return e.deliverFirst(ctx, webhookID, reviewID, body, by)
}

// deliverFirst applies the first copy of a delivery and stores its
// outcome, or lets the delivery go when it came to none.
func (e *Engine) deliverFirst(ctx context.Context, webhookID, reviewID string, body []byte, by []string) error {
	err := e.applyCallback(ctx, reviewID, body, by)
	switch {
	case err == nil:
		e.settle(ctx, webhookID, reviewID, work.DeliveryApplied)
	case errors.Is(err, ErrConflictingCompletion):
		e.settle(ctx, webhookID, reviewID, work.DeliveryConflict)
	case errors.Is(err, domain.ErrInvalidFinding):
		e.settle(ctx, webhookID, reviewID, work.DeliveryInvalid)
	default:
		// Not found, or the store failed: let a redelivery try again.
		if ferr := e.store.ForgetDelivery(context.WithoutCancel(ctx), webhookID, reviewID); ferr != nil {
			e.log.Warn("forget callback delivery; a redelivery is checked against the ledger", "review_id", reviewID, "error", ferr.Error())
		}
	}
	return err
}

// settleTries bounds the writes of a delivery's outcome.
const settleTries = 3

// settle stores what became of a delivery, trying a few times. Should it
// still fail, a redelivery finds no outcome and is answered from the
// ledger (redelivered), so nothing is lost but the shortcut.
func (e *Engine) settle(ctx context.Context, webhookID, reviewID, outcome string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	retry := newBackoff()
	var err error
	for try := range settleTries {
		if err = e.store.SetDeliveryOutcome(ctx, webhookID, reviewID, outcome); err == nil {
			return
		}
		e.metrics.storeErrors.Inc()
		if try+1 < settleTries && e.clock.Sleep(ctx, retry.next()) != nil {
			break
		}
	}
	e.log.Warn("store callback outcome; a redelivery is checked against the ledger", "review_id", reviewID, "outcome", outcome, "error", err.Error())
}

// deliveryWait bounds how long a copy of a delivery waits for the first
// copy's outcome when the ledger cannot answer for it yet.
const deliveryWait = 5 * time.Second

// redelivered answers a delivery seen before: as it was answered then.
// When no outcome is stored (the first copy is still being handled by
// another process, since copies in this one share its answer, or its
// outcome could not be stored), it waits for the outcome, polling, while
// the ledger cannot say what the first copy comes to (answerFromLedger);
// a first copy that lets the delivery go meanwhile leaves this one to be
// handled afresh. One webhook-id gets one final answer: when neither the
// outcome nor the ledger answers within deliveryWait, the answer is
// ErrDeliveryInProgress, which the provider sends again.
func (e *Engine) redelivered(ctx context.Context, webhookID, reviewID, outcome string, body []byte, by []string) error {
	retry := newBackoff()
	var waited time.Duration
	for {
		switch outcome {
		case work.DeliveryApplied:
			return nil
		case work.DeliveryInvalid:
			return fmt.Errorf("webhook %s delivered again: %w", webhookID, domain.ErrInvalidFinding)
		case work.DeliveryConflict:
			return e.callbackConflict(ctx, reviewID, redelivery(body, "webhook delivered again"))
		}
		if answered, err := e.answerFromLedger(ctx, webhookID, reviewID, body); answered {
			return err
		}
		if waited >= deliveryWait {
			e.log.Warn("callback delivery still being handled elsewhere; answered to be sent again", "review_id", reviewID, "waited_ms", waited.Milliseconds())
			return fmt.Errorf("webhook %s for review %q: no outcome after %s: %w", webhookID, reviewID, waited, ErrDeliveryInProgress)
		}
		d := min(retry.next(), deliveryWait-waited)
		if err := e.clock.Sleep(ctx, d); err != nil {
			return err
		}
		waited += d
		first, stored, err := e.store.SeeDelivery(ctx, webhookID, reviewID, e.clock.Now())
		if err != nil {
			return err
		}
		if first {
			// The first copy came to no outcome and let the delivery go.
			return e.deliverFirst(ctx, webhookID, reviewID, body, by)
		}
		outcome = stored
	}
}

// answerFromLedger answers a copy of a delivery whose first copy's outcome
// is not stored, when the ledger says what the first copy comes to: a body
// that is not a finding is invalid whoever reads it; once the attempt it
// names is no longer in flight (or the review no longer pending), the
// finding recorded for it, if any, is there for good, and the copy is
// applied when it is the delivery's finding, refused as a duplicate
// otherwise, as the first copy is. While the attempt is in flight the
// first copy may still record the finding or be refused (its timeout
// passed): answered is false.
func (e *Engine) answerFromLedger(ctx context.Context, webhookID, reviewID string, body []byte) (answered bool, err error) {
	snap, err := e.ledger.Load(ctx, reviewID)
	if err != nil {
		return true, err
	}
	f, err := callbackFinding(reviewID, body)
	if err != nil {
		return true, fmt.Errorf("webhook %s delivered again: %w", webhookID, err)
	}
	if n, _, _, _ := snap.InFlight(); snap.State() == domain.StatePending && n == f.Attempt {
		return false, nil
	}
	held, err := e.holdsFinding(ctx, f)
	if err != nil {
		return true, err
	}
	if held {
		e.settle(ctx, webhookID, reviewID, work.DeliveryApplied)
		return true, nil
	}
	return true, e.refuseCallback(ctx, snap.Review, redelivery(body, "webhook delivered twice at once"))
}

// holdsFinding reports whether the review's ledger holds f: the finding
// recorded for f's attempt, by a response or a callback under any
// webhook-id, is equal to it (domain.Finding.Equal).
func (e *Engine) holdsFinding(ctx context.Context, f domain.Finding) (bool, error) {
	h, err := e.ledger.History(ctx, f.ReviewID)
	if err != nil {
		return false, err
	}
	for _, ent := range h.Events {
		if r, ok := ent.Event.(domain.FindingReceived); ok && r.Attempt == f.Attempt {
			// An attempt has one finding at most: it ends the attempt.
			return r.Finding().Equal(f), nil
		}
	}
	return false, nil
}

// callbackFinding reads a callback's body as a complete finding for the
// review; the error wraps domain.ErrInvalidFinding.
func callbackFinding(reviewID string, body []byte) (domain.Finding, error) {
	var cb provider.CallbackBody
	if err := json.Unmarshal(body, &cb); err != nil {
		return domain.Finding{}, fmt.Errorf("callback body is not JSON: %w", domain.ErrInvalidFinding)
	}
	if cb.Attempt < 1 {
		return domain.Finding{}, fmt.Errorf("callback attempt must be at least 1, got %d: %w", cb.Attempt, domain.ErrInvalidFinding)
	}
	f := domain.Finding{ReviewID: cb.ReviewID, Attempt: cb.Attempt, State: domain.Decision(cb.State), Reasons: cb.Reasons}
	if err := f.CheckComplete(reviewID); err != nil {
		return domain.Finding{}, err
	}
	return f, nil
}

// applyCallback commits a callback's finding. A finding that cannot be
// committed because the review holds it already (recorded by another
// webhook-id, by a copy of this one, or by the provider's response) is
// answered as applied: it changes nothing and is no conflict.
func (e *Engine) applyCallback(ctx context.Context, reviewID string, body []byte, by []string) (err error) {
	snap, err := e.ledger.Load(ctx, reviewID)
	if err != nil {
		return err
	}
	ctx, traced := e.traceCallback(ctx, snap)
	defer func() { traced(err) }()
	f, err := callbackFinding(reviewID, body)
	if err != nil {
		return err
	}
	if n, _, _, _ := snap.InFlight(); n == f.Attempt && by != nil && !slices.Contains(by, snap.InFlightProvider()) {
		return fmt.Errorf("callback for attempt %d of provider %q signed with another provider's secret: %w", n, snap.InFlightProvider(), provider.ErrInvalidSignature)
	}
	var now time.Time
	done, step, err := e.commands.Run(ctx, reviewID, snap, actorProvider, func(rv *ledger.Snapshot, at time.Time) (ledger.Step, error) {
		now = at
		events, err := rv.RecordFinding(f, domain.SourceCallback, at)
		if err != nil {
			return ledger.Step{}, err
		}
		// At the revision of the in-flight AttemptStarted: anything
		// appended since fails the write.
		return ledger.Step{Events: events, Work: &work.Change{Op: work.Release, ReviewID: reviewID}}, nil
	})
	if errors.Is(err, domain.ErrNotPending) || errors.Is(err, domain.ErrAttemptNotInFlight) || errors.Is(err, eventstore.ErrWrongExpectedVersion) {
		// Read after the refusal: once the attempt is no longer in
		// flight (what moved the review ended it), its finding, if any,
		// is in the ledger for good.
		if held, herr := e.holdsFinding(ctx, f); herr != nil {
			return herr
		} else if held {
			e.log.Info("callback finding already recorded", "review_id", reviewID, "attempt", f.Attempt, "state", string(f.State))
			return nil
		}
	}
	c := domain.Conflict{Attempt: f.Attempt, Source: domain.SourceCallback, State: f.State}
	switch {
	case errors.Is(err, domain.ErrNotPending):
		c.Reason, c.Detail = domain.ConflictReviewMovedOn, "review is "+string(snap.State())
		return e.refuseCallback(ctx, snap.Review, c)
	case errors.Is(err, domain.ErrAttemptNotInFlight):
		c.Reason, c.Detail = domain.ConflictAttemptNotInFlight, "attempt is not the one in flight"
		return e.refuseCallback(ctx, snap.Review, c)
	case errors.Is(err, eventstore.ErrWrongExpectedVersion):
		c.Reason, c.Detail = domain.ConflictWrongExpectedVersion, "review moved before the finding was committed"
		return e.callbackConflict(ctx, reviewID, c)
	case err != nil:
		return err
	}
	e.forget(reviewID)
	e.recorded(done.Review, step.Events, now, actorProvider)
	return nil
}

// callbackConflict loads the review as it stands now, records a
// conflicting completion from a callback and returns
// ErrConflictingCompletion.
func (e *Engine) callbackConflict(ctx context.Context, reviewID string, c domain.Conflict) error {
	snap, err := e.ledger.Load(ctx, reviewID)
	if err != nil {
		return err
	}
	return e.refuseCallback(ctx, snap.Review, c)
}

// refuseCallback records a conflicting completion from a callback against
// r, the review as it stands, and returns ErrConflictingCompletion.
func (e *Engine) refuseCallback(ctx context.Context, r *domain.Review, c domain.Conflict) error {
	e.conflict(ctx, r, actorProvider, c)
	return fmt.Errorf("review %q attempt %d: %s: %w", r.ID(), c.Attempt, c.Detail, ErrConflictingCompletion)
}

// redelivery describes a callback delivery refused again: the attempt and
// state its body names, when it can be read.
func redelivery(body []byte, detail string) domain.Conflict {
	var cb provider.CallbackBody
	_ = json.Unmarshal(body, &cb) // an unreadable body names attempt 0
	c := domain.Conflict{Attempt: max(cb.Attempt, 0), Source: domain.SourceCallback, Reason: domain.ConflictDuplicateDelivery, Detail: detail}
	if d := domain.Decision(cb.State); d.Valid() {
		c.State = d
	}
	return c
}

// conflict logs and counts a conflicting completion and records it in the
// review's conflict stream (ConflictingCompletionRecorded), where auditors
// and the SLO read model find it. It changes nothing in the review. r is
// the review as it stands when the completion is refused. A conflict that
// cannot be recorded is logged: the refusal stands either way.
func (e *Engine) conflict(ctx context.Context, r *domain.Review, actor ledger.Actor, c domain.Conflict) {
	now := e.clock.Now()
	e.metrics.conflicts.WithLabelValues(c.Source).Inc()
	e.log.Warn("conflicting completion", "review_id", r.ID(), "attempt", c.Attempt, "outcome", "conflicting_completion",
		"source", c.Source, "reason", string(c.Reason), "detail", c.Detail, "remaining_budget_ms", max(0, r.Remaining(now).Milliseconds()))
	ev, err := r.RecordConflict(c, now)
	if err == nil {
		err = e.ledger.RecordConflict(context.WithoutCancel(ctx), ev, actor)
	}
	if err != nil {
		e.metrics.storeErrors.Inc()
		e.log.Error("record conflicting completion", "review_id", r.ID(), "attempt", c.Attempt, "error", err.Error())
	}
}
