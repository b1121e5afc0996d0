package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/reviewledger/reviewledger/api/engine/work"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

var (
	actorEngine  = ledger.Actor{Name: "engine"}
	actorSweeper = ledger.Actor{Name: "sweeper"}
)

// job is a review this process works or has parked. Its state stays in
// memory between steps; it is reloaded only when an append fails its check.
type job struct {
	id       string
	deadline time.Time
	snap     *ledger.Snapshot // nil: load before the next step
	payload  *work.Payload    // nil: read when an attempt is to start
	awaiting int              // the attempt whose callback the review waits for
	sweep    bool             // taken by the deadline sweeper
	answer   *answer          // the answer of the attempt in flight, not yet recorded
	unsure   *unsureStep      // a step whose write may have been stored: learn first
	slot     bool             // holds a call slot for the attempt it starts
	// breakerDone records the outcome of the attempt it starts with its
	// provider's circuit breaker; nil when not admitted by one.
	breakerDone func(error)
	calling     bool // its attempt was started as it was created: call first
	// parkUntil is set by the step that parks j; its goroutine parks it
	// on its way out, so that j is never taken up while still worked.
	parkUntil *time.Time
	// recheck is the park of a job taken up again before it parked (see
	// reclaimed): its goroutine first finds out whether this process holds
	// the record, and parks it as planned when it does not.
	recheck *time.Time

	// Under Engine.mu:
	parked     bool
	dueAt      time.Time // parked: when it is due again
	leaseUntil time.Time // working: when this process stops calling for it
	heldSince  time.Time // working: when this process knew it held the lease (its claim or creation returned)
	lost       bool      // working: the lease was found held by another, or gone
	// reclaimed: working, and a claim of this process took the record
	// meanwhile: its lease had lapsed, or the park the job just committed
	// was taken back before the job parked in memory; reclaimedSweep: the
	// claim was the deadline sweeper's.
	reclaimed, reclaimedSweep bool
	cancelCall                context.CancelCauseFunc
	onDone                    func() // called once the job's goroutine ends
}

// answer is what one call came to, kept until it is recorded.
type answer struct {
	attempt int
	domain.Answer
	at    time.Time
	async bool // accepted for asynchronous review (202)
}

// unsureStep is a step whose write failed without telling whether it was
// stored (ledger.UnsureError): the next step learns which before it plans
// anything, since planning again would write new events whose check fails
// against the stored ones.
type unsureStep struct {
	write   *ledger.UnsureError
	plan    plan
	now     time.Time
	refused *domain.Conflict // the answer the step's conclusion refused, to log once written
}

// work carries out the steps of j until it parks, leaves the automated
// path, or the engine gives it up (stopping, or the lease lost). Store
// errors are retried with backoff: a transient fault never abandons a
// review.
func (e *Engine) work(j *job) {
	defer e.done(j)
	if j.recheck != nil && !e.heldAgain(j) {
		return
	}
	if j.calling {
		j.calling = false
		e.call(j)
	}
	retry := newBackoff()
	for {
		more, err := e.step(j)
		if err == nil {
			if !more {
				return
			}
			retry.reset()
			continue
		}
		e.releaseSlot(j)
		e.metrics.storeErrors.Inc()
		wait := retry.next()
		e.log.Warn("review step failed; retrying", "review_id", j.id, "error", err.Error(), "retry_in_ms", wait.Milliseconds())
		if !e.pause(j, wait) {
			return
		}
	}
}

// heldAgain reports whether this process holds the record of j, whose
// park was committed and then claimed by this process before j parked in
// memory; when it does not (the claim came before the park, whose commit
// then gave the record up), j parks as planned. A store error is retried
// until the engine stops; stopping, j parks (the stop releases what the
// process holds).
func (e *Engine) heldAgain(j *job) bool {
	until := *j.recheck
	j.recheck = nil
	retry := newBackoff()
	for {
		held, err := e.holds(j)
		if err == nil {
			if !held {
				j.parkUntil = &until
			}
			return held
		}
		e.metrics.storeErrors.Inc()
		wait := retry.next()
		e.log.Warn("find out whether a review taken up as it parked is held here; retrying", "review_id", j.id, "error", err.Error(), "retry_in_ms", wait.Milliseconds())
		if e.clock.Sleep(e.stopping, wait) != nil {
			j.parkUntil = &until
			return false
		}
	}
}

// holds renews j's lease and reports whether this process holds its
// record: renewed, or held but left unextended (being written at the
// moment), when the claim's lease stands.
func (e *Engine) holds(j *job) (bool, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(e.stopping), e.cfg.StopTimeout)
	defer cancel()
	_, held, err := e.renewOne(ctx, j)
	return held, err
}

// pause waits before a step is tried again. A stopping engine still tries
// to record an answer it holds, until Config.StopTimeout after the stop;
// with nothing to record it gives the review up at once (it stays where
// the store has it, and the lease is released or expires).
func (e *Engine) pause(j *job, wait time.Duration) bool {
	if e.clock.Sleep(e.stopping, wait) == nil {
		return true
	}
	if j.answer == nil || e.clock.Now().After(e.stoppedAt().Add(e.cfg.StopTimeout)) {
		return false
	}
	return e.clock.Sleep(context.Background(), wait) == nil
}

// step carries out one step of j: it records the answer of the attempt
// in flight, if any, with whatever Next says follows (closing a lost
// attempt, escalating, starting the next attempt, parking, leaving the
// automated path), in one append with the change to the work record. It
// returns false when the job's goroutine is done.
func (e *Engine) step(j *job) (bool, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(e.stopping), e.cfg.StopTimeout)
	defer cancel()
	if j.unsure != nil {
		return e.learn(ctx, j)
	}
	if j.snap == nil {
		snap, err := e.ledger.Load(ctx, j.id)
		switch {
		case errors.Is(err, domain.ErrReviewNotFound):
			return false, e.giveUp(ctx, j)
		case err != nil:
			return false, err
		}
		j.snap = snap
	}
	lost := e.isLost(j)
	if j.answer == nil && (lost || e.stopping.Err() != nil) {
		return false, nil // nothing to record; the next owner carries on
	}
	now := e.clock.Now()
	events, refused := e.conclude(j)
	p, err := e.plan(ctx, j, events, now, lost)
	if err != nil {
		return false, err
	}
	traced := e.traceCommit(ctx, j.snap, p.events, refused)
	snap, err := e.commit(ctx, j, p)
	traced(err)
	if u := (*ledger.UnsureError)(nil); errors.As(err, &u) {
		j.unsure = &unsureStep{write: u, plan: p, now: now, refused: refused}
	}
	if errors.Is(err, eventstore.ErrWrongExpectedVersion) {
		e.releaseSlot(j)
		if j.answer != nil && j.answer.Finding != nil && refused == nil {
			e.conflict(ctx, e.current(ctx, j), actorEngine, domain.Conflict{Attempt: j.answer.attempt, Source: domain.SourceResponse,
				Reason: domain.ConflictWrongExpectedVersion, State: j.answer.Finding.State, Detail: "review moved while the attempt ran"})
		}
		j.snap, j.answer = nil, nil
		return true, nil
	}
	if err != nil {
		return false, err
	}
	if refused != nil {
		e.conflict(ctx, j.snap.Review, actorEngine, *refused)
	}
	return e.written(j, p, snap, now, lost)
}

// written carries on from a step whose write is stored.
func (e *Engine) written(j *job, p plan, snap *ledger.Snapshot, now time.Time, lost bool) (bool, error) {
	e.recorded(p.after, p.events, now, p.actor)
	e.traceWait(j, p, now)
	j.snap, j.answer = snap, nil
	if lost {
		return false, nil
	}
	if p.step.Kind == domain.StepStart && !e.takeSlot(j) {
		return false, nil // stopping: the next owner closes the attempt started
	}
	return e.carry(j, p), nil
}

// learn finds out whether the unsure write of j's last step is stored.
// When it is, the step carries on as written; from the review as stored
// now, planned again, when that has moved on since or the engine is
// stopping. When it is not, the step is planned and written again from the
// snapshot it was made on: it fails its check if another writer moved the
// review meanwhile, as any step does.
func (e *Engine) learn(ctx context.Context, j *job) (bool, error) {
	u := j.unsure
	snap, landed, err := e.ledger.Landed(ctx, u.write)
	if err != nil {
		return false, err
	}
	if !landed {
		j.unsure = nil
		e.log.Info("an unsure step write was not stored; planning it again", "review_id", j.id)
		return true, nil
	}
	_, last := u.write.Revisions()
	moved := snap.Version() != last
	if !moved {
		// The record's change is made again (a park by its owner, a
		// release: both hold when made twice). Where the committer is not
		// atomic it follows the events and may be what failed; and a
		// record parked by the stored write may have been claimed
		// meanwhile, by this process's own poll while the step waited to
		// learn (held again, as still worked), and must be parked again
		// before the job is. Not once the review moved on: a release
		// would delete the record of a round requeued since.
		again := u.plan
		again.events = nil
		if _, err := e.commit(ctx, j, again); err != nil {
			return false, err
		}
	}
	j.unsure = nil
	e.log.Info("an unsure step write was stored", "review_id", j.id)
	if u.refused != nil {
		e.conflict(ctx, j.snap.Review, actorEngine, *u.refused)
	}
	if moved || e.stopping.Err() != nil {
		e.recorded(u.plan.after, u.plan.events, u.now, u.plan.actor)
		j.snap, j.answer = snap, nil
		return true, nil
	}
	return e.written(j, u.plan, snap, u.now, e.isLost(j))
}

// plan is what one step writes: the events (an attempt's conclusion, and
// the steps Next folds in that are only ledger writes: closing a lost
// attempt, escalating, starting an attempt) and the step it ends on, which
// says what becomes of the work record.
type plan struct {
	events []domain.Event
	step   domain.Step
	after  *domain.Review // the review once events are applied
	actor  ledger.Actor
	// keep: the work record is left as it is (the lease was lost: whoever
	// holds the review now carries on).
	keep bool
}

// plan asks Next what j needs after events until a step that is not only
// a ledger write: start (its AttemptStarted included), wait or none. With
// hold (the lease lost), the answer's events are all it writes.
func (e *Engine) plan(ctx context.Context, j *job, events []domain.Event, now time.Time, hold bool) (plan, error) {
	r := j.snap.Review.Clone()
	for _, ev := range events {
		if err := r.Apply(r.Version()+1, ev); err != nil {
			return plan{}, fmt.Errorf("review %q: conclusion does not apply: %w", j.id, err)
		}
	}
	p := plan{events: events, after: r, actor: actorEngine, step: domain.Step{Kind: domain.StepNone}}
	if j.sweep {
		p.actor = actorSweeper
	}
	if hold {
		p.keep = true
		return p, nil
	}
	for range 8 {
		st, at, err := e.next(ctx, j, r, now)
		if err != nil {
			return plan{}, err
		}
		p.step = st
		if st.Kind == domain.StepWait || st.Kind == domain.StepNone {
			return p, nil
		}
		evs, err := r.EventsFor(st, at)
		if err != nil {
			return plan{}, fmt.Errorf("review %q: %s: %w", j.id, st.Kind, err)
		}
		for _, ev := range evs {
			if err := r.Apply(r.Version()+1, ev); err != nil {
				return plan{}, fmt.Errorf("review %q: %s does not apply: %w", j.id, st.Kind, err)
			}
		}
		p.events = append(p.events, evs...)
		if st.Kind == domain.StepStart {
			return p, nil
		}
	}
	return plan{}, fmt.Errorf("review %q: no step to stop at after %d events", j.id, len(p.events))
}

// next asks the decider, gathering what it needs only when it needs it:
// for an attempt about to start, the content, the retry budget (taken now,
// where it is counted) and a call slot. A stopping engine starts nothing:
// the review waits, due at once, for the next owner.
func (e *Engine) next(ctx context.Context, j *job, r *domain.Review, now time.Time) (domain.Step, time.Time, error) {
	f := e.facts(r, domain.Facts{RetryAllowed: true, Awaiting: j.awaiting, Sweep: j.sweep})
	st := domain.Next(r, now, f)
	if st.Kind != domain.StepStart {
		return st, now, nil
	}
	if e.stopping.Err() != nil {
		return domain.Step{Kind: domain.StepWait, Until: now}, now, nil
	}
	if err := e.loadPayload(ctx, j, r); err != nil {
		return domain.Step{}, now, err
	}
	if j.payload == nil {
		f.PayloadMissing = true
		return domain.Next(r, now, f), now, nil
	}
	if err := e.renewOwn(ctx, j); err != nil {
		return domain.Step{}, now, err
	}
	if !e.leaseLeft(j, now) {
		return domain.Step{}, now, errLeaseShort
	}
	if st = e.admit(j, r, now, &f, st); st.Kind != domain.StepStart {
		return st, now, nil
	}
	if e.tryTakeSlot(j) {
		return st, now, nil
	}
	if !e.takeSlot(j) {
		e.releaseBreaker(j)
		return domain.Step{Kind: domain.StepWait, Until: now}, now, nil
	}
	return e.afterSlot(j, r, st, f, now)
}

// admit checks a start against its provider: its breaker (an open one, or
// one whose half-open probes are taken, is passed over) and, for a retry,
// its retry budget (taken now, where it is counted). Either refusal asks
// the decider again with what was learnt, which may choose another
// provider of the route, a wait, or an escalation. j keeps the breaker's
// admission until the call ends.
func (e *Engine) admit(j *job, r *domain.Review, now time.Time, f *domain.Facts, st domain.Step) domain.Step {
	for st.Kind == domain.StepStart {
		u := e.upstreams[st.Provider]
		var done func(error)
		if !slices.Contains(f.Open, st.Provider) {
			var ok bool
			if done, ok = u.allow(); !ok {
				f.Open = append(f.Open, st.Provider)
				st = domain.Next(r, now, *f)
				continue
			}
		} // else every circuit of the route is open: a probe the breaker does not count
		if st.Retry && !u.budget.take(now) {
			if done != nil {
				done(errNotCounted)
			}
			e.metrics.retryBudgetExhausted.WithLabelValues(u.label).Inc()
			f.BudgetSpent = append(f.BudgetSpent, st.Provider)
			st = domain.Next(r, now, *f)
			continue
		}
		if !st.Retry {
			u.budget.record(now)
		}
		e.metrics.observeBudget(u.budget, now, u.label)
		e.releaseBreaker(j)
		j.breakerDone = done
		return st
	}
	return st
}

// releaseBreaker gives back j's breaker admission uncounted: its attempt
// was not made.
func (e *Engine) releaseBreaker(j *job) {
	if j.breakerDone != nil {
		j.breakerDone(errNotCounted)
		j.breakerDone = nil
	}
}

// afterSlot is the start next decided at now, once j has its call slot
// after waiting for one: the attempt starts when the slot is taken, so
// the wait is not charged to its timeout. A wait long enough to change
// the decision (the review's budget spent meanwhile) changes the step,
// the slot given back; a lease left too short to call is errLeaseShort,
// as before the wait.
func (e *Engine) afterSlot(j *job, r *domain.Review, st domain.Step, f domain.Facts, now time.Time) (domain.Step, time.Time, error) {
	at := e.clock.Now()
	again := domain.Next(r, at, f)
	switch {
	case again.Kind != domain.StepStart:
		e.releaseSlot(j)
		return again, at, nil
	case again.Provider != st.Provider:
		// Another provider now (a circuit changed meanwhile): decided
		// again at once, admitted by that one.
		e.releaseSlot(j)
		return domain.Step{Kind: domain.StepWait, Until: at}, at, nil
	}
	if !e.leaseLeft(j, at) {
		e.releaseSlot(j)
		return domain.Step{}, at, errLeaseShort
	}
	return st, at, nil
}

// errLeaseShort: the lease has too little time left to start a call; the
// renewal is failing. The step is retried (the lease may be renewed yet).
var errLeaseShort = errors.New("lease too short to start an attempt")

// loadPayload reads j's content when it is not in memory; j.payload stays
// nil when none is stored, or it is not the content the ledger recorded.
func (e *Engine) loadPayload(ctx context.Context, j *job, r *domain.Review) error {
	if j.payload != nil && j.payload.Digest != r.PayloadDigest() {
		j.payload = nil
	}
	if j.payload != nil {
		return nil
	}
	pl, err := e.store.Payload(ctx, j.id)
	switch {
	case errors.Is(err, work.ErrPayloadMissing):
		return nil
	case err != nil:
		return err
	case pl.Digest == r.PayloadDigest():
		j.payload = &pl
	}
	return nil
}

// commit writes the plan's events with the change the step it ends on
// makes to the work record: none for a start (the lease is kept), a park
// for a wait, a release when the review leaves the automated path. A plan
// without events changes the record alone.
func (e *Engine) commit(ctx context.Context, j *job, p plan) (*ledger.Snapshot, error) {
	change := work.Change{ReviewID: j.id, Owner: e.cfg.Owner}
	switch {
	case p.keep:
	case p.step.Kind == domain.StepWait:
		change.Op, change.Until = work.Park, p.step.Until
		if n, _, _, _ := p.after.InFlight(); n != 0 && n == j.awaiting {
			change.Awaiting = n
		}
	case p.step.Kind == domain.StepNone:
		change.Op = work.Release
	}
	if len(p.events) > 0 {
		next, _, err := e.commands.Run(ctx, j.id, j.snap, p.actor, func(*ledger.Snapshot, time.Time) (ledger.Step, error) {
			return ledger.Step{Events: p.events, Work: &change}, nil // planned on j.snap
		})
		return next, err
	}
	switch change.Op {
	case work.Park:
		return j.snap, e.store.Park(ctx, e.cfg.Owner, j.id, change.Until, change.Awaiting)
	case work.Release:
		return j.snap, e.store.Done(ctx, j.id)
	}
	return j.snap, nil
}

// carry does what the step the plan ended on says, once it is written: it
// reports whether the job goes on.
func (e *Engine) carry(j *job, p plan) bool {
	switch p.step.Kind {
	case domain.StepStart:
		e.call(j)
		return true
	case domain.StepWait:
		until := p.step.Until
		j.parkUntil = &until // parked as its goroutine ends (done)
	default:
		e.finish(j)
	}
	return false
}

// conclude turns the answer of j's attempt into its events. An answer the
// review cannot take any more is refused: the conflict is recorded once the
// step is written.
func (e *Engine) conclude(j *job) ([]domain.Event, *domain.Conflict) {
	a := j.answer
	switch {
	case a == nil:
		return nil, nil
	case a.async:
		j.awaiting, j.answer = a.attempt, nil
		return nil, nil
	}
	events, refused, err := j.snap.Conclude(a.attempt, a.Answer, a.at)
	if err != nil {
		// The attempt is no longer in flight and the answer is no finding:
		// whoever closed it recorded how; there is nothing to add.
		j.answer = nil
		return nil, nil
	}
	return events, refused
}

// giveUp handles a work record whose review has no stream: a submission
// that did not get as far as creating it, on a ledger outside the
// database. Before the deadline it may still come (its submitter hints
// it then); after, the record is deleted.
func (e *Engine) giveUp(ctx context.Context, j *job) error {
	now := e.clock.Now()
	if now.After(j.deadline.Add(e.cfg.SweepGrace)) {
		return e.store.Done(ctx, j.id)
	}
	return e.store.Park(ctx, e.cfg.Owner, j.id, j.deadline.Add(e.cfg.SweepGrace), 0)
}

// current reloads j's review for the record of a conflict; the snapshot
// in memory when it cannot be read.
func (e *Engine) current(ctx context.Context, j *job) *domain.Review {
	snap, err := e.ledger.Load(ctx, j.id)
	if err != nil {
		return j.snap.Review
	}
	return snap.Review
}
