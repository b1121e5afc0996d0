package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/reviewledger/reviewledger/api/provider"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

var actorProvider = ledger.Actor{Name: "provider"}

// HandleCallback verifies a provider's findings callback (Standard
// Webhooks signature, 5-minute tolerance, webhook-id de-duplication) and
// commits its finding at the revision of the attempt's AttemptStarted.
//
// Errors: provider.ErrInvalidSignature (bad, missing or stale signature),
// domain.ErrReviewNotFound, ErrConflictingCompletion (the attempt is not in
// flight, the review moved on, or the append failed its expected-revision
// check; each counted as a conflicting completion), domain.ErrInvalidFinding
// (the body is not a complete finding for the review). A webhook-id already
// applied is answered nil again and changes nothing.
func (s *Service) HandleCallback(ctx context.Context, reviewID string, header http.Header, body []byte) error {
	if s.cfg.Signer == nil {
		return fmt.Errorf("no callback secret configured: %w", provider.ErrInvalidSignature)
	}
	now := s.clock.Now()
	webhookID, err := s.cfg.Signer.Verify(header, body, now)
	if err != nil {
		return err
	}
	if err := domain.ValidateReviewID(reviewID); err != nil {
		return fmt.Errorf("review %q: %w", reviewID, domain.ErrReviewNotFound)
	}
	first, outcome, err := s.state.seeWebhook(ctx, webhookID, reviewID, now)
	if err != nil {
		return err
	}
	if !first {
		switch outcome {
		case webhookApplied:
			return nil
		case webhookConflict:
			return s.callbackConflict(ctx, reviewID, redelivered(body, domain.ConflictDuplicateDelivery, "webhook delivered again"))
		case webhookInvalid:
			return fmt.Errorf("webhook %s delivered again: %w", webhookID, domain.ErrInvalidFinding)
		}
		// Still being processed by a concurrent delivery: the later one
		// cannot be the one that applies.
		return s.callbackConflict(ctx, reviewID, redelivered(body, domain.ConflictDuplicateDelivery, "webhook delivered twice at once"))
	}
	err = s.applyCallback(ctx, reviewID, body)
	switch {
	case err == nil:
		_ = s.state.webhookOutcome(context.WithoutCancel(ctx), webhookID, webhookApplied)
	case errors.Is(err, ErrConflictingCompletion):
		_ = s.state.webhookOutcome(context.WithoutCancel(ctx), webhookID, webhookConflict)
	case errors.Is(err, domain.ErrInvalidFinding):
		_ = s.state.webhookOutcome(context.WithoutCancel(ctx), webhookID, webhookInvalid)
	default:
		// Not found, or the store failed: let a redelivery try again.
		s.state.forgetWebhook(context.WithoutCancel(ctx), webhookID)
	}
	return err
}

func (s *Service) applyCallback(ctx context.Context, reviewID string, body []byte) error {
	rv, err := s.ledger.Load(ctx, reviewID)
	if err != nil {
		return err
	}
	var cb provider.CallbackBody
	if err := json.Unmarshal(body, &cb); err != nil {
		return fmt.Errorf("callback body is not JSON: %w", domain.ErrInvalidFinding)
	}
	if cb.Attempt < 1 {
		return fmt.Errorf("callback attempt must be at least 1, got %d: %w", cb.Attempt, domain.ErrInvalidFinding)
	}
	f := domain.Finding{ReviewID: cb.ReviewID, Attempt: cb.Attempt, State: domain.Decision(cb.State), Reasons: cb.Reasons}
	if err := f.CheckComplete(reviewID); err != nil {
		return err
	}
	now := s.clock.Now()
	events, err := rv.RecordFinding(f, domain.SourceCallback, now)
	conflict := domain.Conflict{Attempt: cb.Attempt, Source: domain.SourceCallback, State: f.State}
	switch {
	case errors.Is(err, domain.ErrNotPending):
		conflict.Reason, conflict.Detail = domain.ConflictReviewMovedOn, "review is "+string(rv.State())
		return s.refuseCallback(ctx, rv.Review, conflict)
	case errors.Is(err, domain.ErrAttemptNotInFlight):
		conflict.Reason, conflict.Detail = domain.ConflictAttemptNotInFlight, "attempt is not the one in flight"
		return s.refuseCallback(ctx, rv.Review, conflict)
	case err != nil:
		return err
	}
	// rv is at the revision of the in-flight AttemptStarted: anything
	// appended since fails this append.
	done, err := s.ledger.Append(ctx, rv, actorProvider, events...)
	if errors.Is(err, eventstore.ErrWrongExpectedVersion) {
		conflict.Reason, conflict.Detail = domain.ConflictWrongExpectedVersion, "review moved before the finding was committed"
		return s.callbackConflict(ctx, reviewID, conflict)
	}
	if err != nil {
		return err
	}
	if len(events) > 1 {
		s.metrics.escalations.WithLabelValues(string(domain.ReasonHumanGate)).Inc()
	}
	s.logAttempt(rv.Review, cb.Attempt, "finding_callback", now.Sub(startedAt(rv)).Milliseconds(), now)
	_ = s.finish(ctx, done)
	s.waiters.notify(reviewID, cb.Attempt)
	return nil
}

func startedAt(rv *ledger.Review) (t0 time.Time) {
	_, _, t0, _ = rv.InFlight()
	return t0
}

// callbackConflict loads the review as it stands now, records a
// conflicting completion from a callback and returns
// ErrConflictingCompletion.
func (s *Service) callbackConflict(ctx context.Context, reviewID string, c domain.Conflict) error {
	rv, err := s.ledger.Load(ctx, reviewID)
	if err != nil {
		return err
	}
	return s.refuseCallback(ctx, rv.Review, c)
}

// refuseCallback records a conflicting completion from a callback against
// rv, the review as it stands, and returns ErrConflictingCompletion.
func (s *Service) refuseCallback(ctx context.Context, rv *domain.Review, c domain.Conflict) error {
	s.conflict(ctx, rv, actorProvider, c)
	return fmt.Errorf("review %q attempt %d: %s: %w", rv.ID(), c.Attempt, c.Detail, ErrConflictingCompletion)
}

// redelivered describes a callback delivery refused again: the attempt
// and state its body names, when it can be read.
func redelivered(body []byte, reason domain.ConflictReason, detail string) domain.Conflict {
	var cb provider.CallbackBody
	_ = json.Unmarshal(body, &cb)
	c := domain.Conflict{Attempt: max(cb.Attempt, 0), Source: domain.SourceCallback, Reason: reason, Detail: detail}
	if d := domain.Decision(cb.State); d.Valid() {
		c.State = d
	}
	return c
}

// waiters lets an attempt waiting for its callback learn, in this process,
// that the callback was committed.
type waiters struct {
	mu sync.Mutex
	m  map[waitKey]*waiter
}

type waitKey struct {
	review  string
	attempt int
}

type waiter struct {
	key  waitKey
	done chan struct{}
}

func newWaiters() *waiters { return &waiters{m: make(map[waitKey]*waiter)} }

func (w *waiters) register(reviewID string, attempt int) *waiter {
	k := waitKey{reviewID, attempt}
	x := &waiter{key: k, done: make(chan struct{})}
	w.mu.Lock()
	w.m[k] = x
	w.mu.Unlock()
	return x
}

func (w *waiters) release(x *waiter) {
	w.mu.Lock()
	if w.m[x.key] == x {
		delete(w.m, x.key)
	}
	w.mu.Unlock()
}

func (w *waiters) notify(reviewID string, attempt int) {
	w.mu.Lock()
	x := w.m[waitKey{reviewID, attempt}]
	delete(w.m, waitKey{reviewID, attempt})
	w.mu.Unlock()
	if x != nil {
		close(x.done)
	}
}
