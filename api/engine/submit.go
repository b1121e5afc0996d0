package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/reviewledger/reviewledger/api/engine/work"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

// SubmitRequest is a review to open.
type SubmitRequest struct {
	ReviewID, ContentClass, ContentType string
	Content                             []byte
	Actor                               ledger.Actor
}

// Digest is the payload digest recorded in Submitted: "sha256:<hex>".
func Digest(content []byte) string {
	sum := sha256.Sum256(content)
	var out [len("sha256:") + 2*sha256.Size]byte
	n := copy(out[:], "sha256:")
	hex.Encode(out[n:], sum[:])
	return string(out[:])
}

// Submit validates a submission and creates the review: its Submitted
// event (expected revision NoStream), its content and its work record,
// all or nothing where the store is atomic. It returns once the review is
// durable. A review submitted while this process runs workers with room
// to spare is held by this process from that first write and worked at
// once; otherwise its ID is published to the work topic for whichever
// process takes it (and any process's poll finds it regardless).
//
// Submitting the same review again (same ID, class, content type and
// content) returns the review with created false, and makes sure a pending
// one has a work record and is hinted.
//
// Errors: *domain.FieldError wrapping domain.ErrInvalidReviewID,
// domain.ErrUnknownClass for a class not in the policy, domain.ErrReviewExists
// for the same ID with another class, content type or content.
func (e *Engine) Submit(ctx context.Context, req SubmitRequest) (*ledger.Snapshot, bool, error) {
	ctx, span := e.startSubmit(ctx, &req)
	snap, created, err := e.submit(ctx, req)
	span.SetAttributes(AttrCreated.Bool(created))
	e.end(span, err)
	return snap, created, err
}

func (e *Engine) submit(ctx context.Context, req SubmitRequest) (*ledger.Snapshot, bool, error) {
	if err := domain.ValidateReviewID(req.ReviewID); err != nil {
		return nil, false, err
	}
	class, err := e.cfg.Policy.Class(req.ContentClass)
	if err != nil {
		return nil, false, err
	}
	now := e.clock.Now()
	pl := work.Payload{Digest: Digest(req.Content), ContentType: req.ContentType, Content: req.Content}
	ev, err := domain.Submit(domain.SubmitCommand{
		ReviewID: req.ReviewID, ContentClass: req.ContentClass, ContentType: req.ContentType,
		PayloadDigest: pl.Digest, PayloadBytes: len(req.Content), Policy: class,
		SubmittedBy: req.Actor.Name, Now: now,
	})
	if err != nil {
		return nil, false, err
	}
	if !e.store.Atomic() {
		// The record is written before the stream here: a review that
		// exists must be answered without writing one for it again.
		if existing, err := e.ledger.Load(ctx, req.ReviewID); err == nil {
			return e.resubmitted(ctx, existing, req, pl.Digest)
		} else if !errors.Is(err, domain.ErrReviewNotFound) {
			return nil, false, err
		}
	}
	change := work.Change{Op: work.Create, ReviewID: req.ReviewID, Deadline: ev.Deadline, Payload: pl, At: now}
	owned := e.works.Load() && e.stopping.Err() == nil && e.store.Atomic() && e.capacity() > 0
	var j *job
	var then []domain.Event
	if owned {
		change.Owner, change.LeaseUntil = e.cfg.Owner, now.Add(e.cfg.Lease)
		j = &job{id: req.ReviewID, deadline: ev.Deadline, payload: &pl}
		then = e.firstAttempt(j, ev, now)
	}
	snap, current, err := e.ledger.CreateThen(ctx, ev, req.Actor, change, actorEngine, then...)
	taken := false // the review exists, created by another write
	if u := (*ledger.UnsureError)(nil); errors.As(err, &u) {
		stored, landed := e.landedCreate(ctx, u)
		if landed {
			snap, current, err = stored, stored, nil
			if owned {
				if now, owned = e.stillOwned(ctx, u, stored, now); !owned {
					e.releaseSlot(j)
					j = nil
				}
			}
		}
		taken = !landed && stored != nil
	}
	if err != nil && j != nil {
		e.releaseSlot(j)
	}
	if taken || errors.Is(err, eventstore.ErrWrongExpectedVersion) {
		existing, err := e.ledger.Load(ctx, req.ReviewID)
		if err != nil {
			return nil, false, err
		}
		return e.resubmitted(ctx, existing, req, pl.Digest)
	}
	if err != nil {
		return nil, false, err
	}
	e.metrics.submitted.WithLabelValues(req.ContentClass).Inc()
	if e.log.Enabled(ctx, slog.LevelDebug) { // the arguments cost allocations even when not logged
		e.log.DebugContext(ctx, "review submitted", "review_id", req.ReviewID, "content_class", req.ContentClass,
			"payload_bytes", len(req.Content), "remaining_budget_ms", class.Budget.Milliseconds(), "owned", owned)
	}
	e.outstanding.created()
	if owned {
		j.snap, j.calling = current, len(then) > 0
		if j.calling {
			u := e.upstreams[then[0].(domain.AttemptStarted).ProviderName()]
			u.budget.record(now)
			e.metrics.observeBudget(u.budget, now, u.label)
		}
		e.adopt(j, now)
		return snap, true, nil
	}
	e.dispatch(ctx, req.ReviewID)
	return snap, true, nil
}

// landedCreate learns whether a creation left unsure by its write (u) was
// stored: landed, with the review as stored now; or not, with the review
// another write created (nil when there is none, or it cannot be told).
// Landed, the submit carries on as created (an owned review is worked
// here, its first attempt included) instead of answering an error for a
// review that exists, owned by this process and worked by none until its
// lease ends; created by another, it is answered as a resubmit.
func (e *Engine) landedCreate(ctx context.Context, u *ledger.UnsureError) (*ledger.Snapshot, bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), landedTimeout)
	defer cancel()
	snap, landed, err := e.ledger.Landed(ctx, u)
	if err != nil {
		return nil, false
	}
	if landed {
		e.log.Info("an unsure submit was stored", "review_id", u.ReviewID)
	}
	return snap, landed
}

// stillOwned says whether a review whose unsure creation was stored
// (stored) is worked here: only as it was written, and while this process
// holds its record, the lease it was written with renewed when it ran out
// meanwhile (nothing renewed it before the review is worked here). It
// returns when the lease held from was sent. A record this process still
// holds but does not work is released, due at once for whoever takes it.
func (e *Engine) stillOwned(ctx context.Context, u *ledger.UnsureError, stored *ledger.Snapshot, sent time.Time) (time.Time, bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), landedTimeout)
	defer cancel()
	ids := []string{u.ReviewID}
	if _, last := u.Revisions(); stored.Version() != last {
		if err := e.store.Release(ctx, e.cfg.Owner, ids, e.clock.Now()); err != nil {
			e.log.Warn("release the record of a review moved on; its lease will end", "review_id", u.ReviewID, "error", err.Error())
		}
		return sent, false
	}
	if e.clock.Now().Before(e.localLease(sent)) {
		return sent, true
	}
	renewedAt := e.clock.Now()
	renewed, _, err := e.store.Renew(ctx, e.cfg.Owner, ids, renewedAt.Add(e.cfg.Lease))
	return renewedAt, err == nil && len(renewed) == 1
}

// landedTimeout bounds the read that learns whether an unsure creation was
// stored.
const landedTimeout = 5 * time.Second

// firstAttempt is the AttemptStarted a review owned from its creation is
// written with, when a call slot is free at once: its first attempt then
// starts in the write that creates it, one commit before the provider is
// called instead of two. Nothing otherwise (the job's first step starts
// the attempt, waiting for a slot). The slot taken is j's.
func (e *Engine) firstAttempt(j *job, ev domain.Submitted, now time.Time) []domain.Event {
	r := &domain.Review{}
	if r.Apply(0, ev) != nil {
		return nil
	}
	f := e.facts(r, domain.Facts{RetryAllowed: true})
	st := domain.Next(r, now, f)
	if st.Kind != domain.StepStart || st.Retry || !e.tryTakeSlot(j) {
		return nil
	}
	if !slices.Contains(f.Open, st.Provider) { // else every circuit is open: an uncounted probe
		done, ok := e.upstreams[st.Provider].allow()
		if !ok { // its probes are taken: the job's first step decides again
			e.releaseSlot(j)
			return nil
		}
		j.breakerDone = done
	}
	evs, err := r.EventsFor(st, now)
	if err != nil {
		e.releaseSlot(j)
		return nil
	}
	return evs
}

// resubmitted answers a submit of a review that exists: the same review
// (class, content type and content) again is not an error. A pending one
// is made sure of: its work record exists (written again if it was lost)
// and its ID is hinted, so whoever has room takes it if nobody holds it.
func (e *Engine) resubmitted(ctx context.Context, existing *ledger.Snapshot, req SubmitRequest, digest string) (*ledger.Snapshot, bool, error) {
	if !existing.SameSubmission(req.ContentClass, req.ContentType, digest) {
		return nil, false, fmt.Errorf("review %q: %w", req.ReviewID, domain.ErrReviewExists)
	}
	if existing.State() == domain.StatePending {
		created, err := e.store.Ensure(ctx, req.ReviewID, existing.Deadline(), e.clock.Now())
		if err != nil {
			return nil, false, err
		}
		if created {
			e.log.Warn("pending review had no work record; written again", "review_id", req.ReviewID)
		}
		e.dispatch(ctx, req.ReviewID)
	}
	return existing, false, nil
}

// dispatch makes a review known to the processes that work reviews: a
// hint here when this process runs workers, and a message on the work
// topic. A message that is lost costs only time: every process polls for
// due work.
func (e *Engine) dispatch(ctx context.Context, reviewID string) {
	if e.works.Load() {
		e.hint(reviewID)
		if e.cfg.Hints.Local() {
			return
		}
	}
	if err := e.publish(reviewID); err != nil {
		e.log.WarnContext(ctx, "publish review work; the poll will find it", "review_id", reviewID, "error", err.Error())
	}
}
