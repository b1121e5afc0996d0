package engine

import (
	"container/heap"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/reviewledger/reviewledger/api/engine/work"
)

// How work reaches this process's goroutines: a review is taken (its work
// record claimed under a lease, or created owned by this process) and
// worked by a goroutine of its own until it parks or leaves the automated
// path. A parked review holds no goroutine: it waits in a timer heap (and,
// should this process die, in its record's due time, for any process's
// poll).

// maxHints bounds the review IDs waiting to be claimed; past it hints are
// dropped (the poll finds their reviews anyway).
const maxHints = 100000

// maxCachedContent bounds the content kept in memory for parked reviews;
// past it, a parking review's content is dropped and read again when its
// next attempt starts.
const maxCachedContent = 32 << 20

// hintSet holds the review IDs to claim: from work messages (the Hints
// port), timers of parked reviews, resubmissions.
type hintSet struct {
	mu   sync.Mutex
	ids  map[string]struct{}
	wake chan struct{}
}

func (h *hintSet) init() {
	h.ids = make(map[string]struct{})
	h.wake = make(chan struct{}, 1)
}

func (h *hintSet) add(ids ...string) {
	h.mu.Lock()
	for _, id := range ids {
		if len(h.ids) < maxHints {
			h.ids[id] = struct{}{}
		}
	}
	h.mu.Unlock()
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

func (h *hintSet) take(n int) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for id := range h.ids {
		if len(out) == n {
			break
		}
		out = append(out, id)
		delete(h.ids, id)
	}
	return out
}

// hint asks this process to claim a review when it has room.
func (e *Engine) hint(reviewID string) { e.hints.add(reviewID) }

// take starts working the reviews claimed. leaseSent is when the claim
// was sent: the lease counts from then.
func (e *Engine) take(claimed []work.Claimed, leaseSent time.Time) {
	for _, c := range claimed {
		e.takeOne(c, leaseSent, false, nil)
	}
}

// takeOne starts working one claimed review; onDone, when set, is called
// once its goroutine ends.
func (e *Engine) takeOne(c work.Claimed, leaseSent time.Time, sweep bool, onDone func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	j := e.jobs[c.ReviewID]
	if j != nil && !j.parked {
		// Still worked here: its lease had lapsed and the claim renewed it,
		// or the park its step just committed was taken back (due, or past
		// its deadline for the sweeper): done has the job find out which
		// before it parks.
		j.leaseUntil, j.heldSince, j.lost, j.reclaimed = e.localLease(leaseSent), e.clock.Now(), false, true
		j.reclaimedSweep = j.reclaimedSweep || sweep
		if onDone != nil {
			onDone()
		}
		return
	}
	if j == nil {
		j = &job{id: c.ReviewID}
		e.jobs[c.ReviewID] = j
	} else {
		e.uncache(j)
	}
	j.parked, j.deadline, j.awaiting, j.sweep, j.onDone = false, c.Deadline, c.Awaiting, sweep, onDone
	if j.payload == nil && c.Payload != nil {
		j.payload = c.Payload
	}
	j.leaseUntil, j.heldSince, j.lost = e.localLease(leaseSent), e.clock.Now(), false
	e.startLocked(j)
}

// adopt works a review this process has just created, holding its lease.
func (e *Engine) adopt(j *job, leaseSent time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.jobs[j.id] != nil {
		e.releaseSlot(j) // j never starts: the slot it took is free again
		return
	}
	j.leaseUntil, j.heldSince = e.localLease(leaseSent), e.clock.Now()
	e.jobs[j.id] = j
	e.startLocked(j)
}

func (e *Engine) startLocked(j *job) {
	e.active++
	e.gaugesLocked()
	e.working.Add(1)
	go e.work(j)
}

// gaugesLocked sets the gauges of reviews worked and parked here.
func (e *Engine) gaugesLocked() {
	e.metrics.inFlight.Set(float64(e.active))
	e.metrics.parked.Set(float64(e.parkedCount()))
}

// done ends a job's goroutine; a parked job stays known (its timer wakes
// it), any other is forgotten.
func (e *Engine) done(j *job) {
	e.releaseSlot(j)
	e.mu.Lock()
	e.active--
	reclaimed, sweep := j.reclaimed, j.reclaimedSweep
	j.reclaimed, j.reclaimedSweep = false, false
	var onDone func()
	switch {
	case j.parkUntil != nil && reclaimed && e.stopping.Err() == nil:
		// A claim of this process took the record while j was worked: the
		// park just committed may have been taken back, and the record be
		// held here, where a parked job would leave it until its lease
		// ends. j goes on, and finds out first (heldAgain); its onDone
		// waits for the goroutine that goes on.
		j.recheck, j.parkUntil = j.parkUntil, nil
		j.sweep = j.sweep || sweep
		e.startLocked(j)
	case j.parkUntil != nil:
		e.parkLocked(j, *j.parkUntil)
		j.parkUntil = nil
		onDone, j.onDone = j.onDone, nil
	default:
		if e.jobs[j.id] == j {
			delete(e.jobs, j.id)
		}
		onDone, j.onDone = j.onDone, nil
	}
	e.gaugesLocked()
	e.mu.Unlock()
	if onDone != nil {
		onDone()
	}
	e.working.Done()
	e.hints.add() // room for more
}

// parkLocked leaves j waiting until its due time: no goroutine, no slot.
// From here on another goroutine may take j up again, so it is called
// only once j's own goroutine has let go of it (done).
func (e *Engine) parkLocked(j *job, until time.Time) {
	j.parked, j.dueAt, j.sweep = true, until, false
	if j.payload != nil {
		if e.cached+len(j.payload.Content) > maxCachedContent {
			j.payload = nil
		} else {
			e.cached += len(j.payload.Content)
		}
	}
	heap.Push(&e.parked, timer{at: until, id: j.id})
	select {
	case e.timerWake <- struct{}{}:
	default:
	}
}

// uncache counts a parked job's content out of the cache as it is taken.
func (e *Engine) uncache(j *job) {
	if j.payload != nil {
		e.cached -= len(j.payload.Content)
	}
}

// forget drops a parked review from memory: it left the automated path
// (a callback decided it).
func (e *Engine) forget(reviewID string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if j := e.jobs[reviewID]; j != nil && j.parked {
		e.uncache(j)
		delete(e.jobs, reviewID)
		e.gaugesLocked()
	}
}

func (e *Engine) parkedCount() int { return len(e.jobs) - e.active }

// timer is a parked review's wake-up.
type timer struct {
	at time.Time
	id string
}

// timers is a min-heap of wake-ups by time.
type timers []timer

func (t timers) Len() int           { return len(t) }
func (t timers) Less(i, j int) bool { return t[i].at.Before(t[j].at) }
func (t timers) Swap(i, j int)      { t[i], t[j] = t[j], t[i] }
func (t *timers) Push(x any)        { *t = append(*t, x.(timer)) }
func (t *timers) Pop() any {
	old := *t
	x := old[len(old)-1]
	*t = old[:len(old)-1]
	return x
}

// timerLoop hints parked reviews as they come due.
func (e *Engine) timerLoop(ctx context.Context) {
	for {
		e.mu.Lock()
		var ids []string
		now := e.clock.Now()
		for e.parked.Len() > 0 && !e.parked[0].at.After(now) {
			t := heap.Pop(&e.parked).(timer)
			if j := e.jobs[t.id]; j != nil && j.parked && j.dueAt.Equal(t.at) {
				ids = append(ids, t.id)
			}
		}
		wait := e.cfg.PollInterval
		if e.parked.Len() > 0 {
			wait = min(wait, e.parked[0].at.Sub(now))
		}
		e.mu.Unlock()
		if len(ids) > 0 {
			e.hints.add(ids...)
		}
		woken := make(chan struct{})
		stop := e.clock.AfterFunc(wait, func() { close(woken) })
		select {
		case <-ctx.Done():
			stop()
			return
		case <-woken:
		case <-e.timerWake:
			stop()
		}
	}
}

// claimLoop claims hinted reviews as room allows, and polls for due ones
// (parked by a process that died, hinted by a message that was lost, or
// held by a lease that expired) every PollInterval, and at once again
// while a poll finds more than there was room for.
func (e *Engine) claimLoop(ctx context.Context) {
	var lastPoll time.Time
	more := true
	for ctx.Err() == nil {
		now := e.clock.Now()
		if room := e.capacity(); room > 0 {
			e.claimHinted(ctx, room)
			if room = e.capacity(); room > 0 && (more || now.Sub(lastPoll) >= e.cfg.PollInterval) {
				more = e.claimDue(ctx, room)
				lastPoll = now
			}
		}
		woken := make(chan struct{})
		stop := e.clock.AfterFunc(e.cfg.PollInterval, func() { close(woken) })
		select {
		case <-ctx.Done():
		case <-woken:
		case <-e.hints.wake:
		}
		stop()
	}
}

func (e *Engine) claimHinted(ctx context.Context, room int) {
	ids := e.hints.take(room)
	if len(ids) == 0 {
		return
	}
	sent := e.clock.Now()
	claimed, err := e.store.Claim(ctx, work.Query{Owner: e.cfg.Owner, LeaseUntil: sent.Add(e.cfg.Lease), Now: sent, IDs: ids})
	if err != nil {
		if ctx.Err() == nil {
			e.metrics.storeErrors.Inc()
			e.log.Warn("claim hinted reviews; retrying", "count", len(ids), "error", err.Error())
			e.hints.add(ids...)
		}
		return
	}
	e.metrics.claimed.WithLabelValues("hint").Add(float64(len(claimed)))
	e.take(claimed, sent)
	e.dropUnclaimed(ids, claimed, sent)
}

// dropUnclaimed forgets parked reviews whose wake-up claim found nothing:
// decided elsewhere, or held or parked by another process, which then
// carries them on.
func (e *Engine) dropUnclaimed(ids []string, claimed []work.Claimed, now time.Time) {
	got := make(map[string]bool, len(claimed))
	for _, c := range claimed {
		got[c.ReviewID] = true
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, id := range ids {
		if j := e.jobs[id]; j != nil && j.parked && !got[id] && !j.dueAt.After(now) {
			e.uncache(j)
			delete(e.jobs, id)
		}
	}
	e.gaugesLocked()
}

// claimDue claims up to room due reviews; it reports whether there may be
// more.
func (e *Engine) claimDue(ctx context.Context, room int) bool {
	sent := e.clock.Now()
	claimed, err := e.store.Claim(ctx, work.Query{Owner: e.cfg.Owner, LeaseUntil: sent.Add(e.cfg.Lease), Now: sent, Limit: room})
	if err != nil {
		if ctx.Err() == nil {
			e.metrics.storeErrors.Inc()
			e.log.Warn("poll for due reviews; retrying", "error", err.Error())
		}
		return false
	}
	e.metrics.claimed.WithLabelValues("poll").Add(float64(len(claimed)))
	e.take(claimed, sent)
	return len(claimed) == room
}

// renewInterval is how often leases are renewed: a fifth of the lease.
func (e *Engine) renewInterval() time.Duration { return e.cfg.Lease / 5 }

// localLease is when this process stops calling for a review whose lease
// was given at sent: two renewals before the lease ends, so that a call is
// cancelled before another process may take the review, even when the
// renewal that would have saved it is one interval late.
func (e *Engine) localLease(sent time.Time) time.Time {
	return sent.Add(e.cfg.Lease - 2*e.renewInterval())
}

// leaseLeft reports whether j's lease leaves time to start a call.
func (e *Engine) leaseLeft(j *job, now time.Time) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return j.leaseUntil.Sub(now) > e.renewInterval()
}

func (e *Engine) isLost(j *job) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return j.lost
}

// renewLoop renews the leases of the reviews this process works every
// renewInterval until ctx is done, and stops the calls of reviews whose
// lease it could not renew in time, or found taken or gone.
func (e *Engine) renewLoop(ctx context.Context) {
	for e.clock.Sleep(ctx, e.renewInterval()) == nil {
		e.renew(ctx)
	}
}

// renew renews the leases that need it: those of reviews worked here whose
// lease ends within two renewal intervals (a review whose step takes
// milliseconds is never renewed at all).
func (e *Engine) renew(ctx context.Context) {
	e.mu.Lock()
	now := e.clock.Now()
	var ids []string
	for id, j := range e.jobs {
		if !j.parked && j.leaseUntil.Sub(now) < 2*e.renewInterval() {
			ids = append(ids, id)
		}
	}
	e.mu.Unlock()
	if len(ids) > 0 {
		e.renewLeases(ctx, ids)
	}
	e.stopLapsedCalls()
}

func (e *Engine) renewLeases(ctx context.Context, ids []string) {
	sent := e.clock.Now()
	renewed, held, err := e.store.Renew(ctx, e.cfg.Owner, ids, sent.Add(e.cfg.Lease))
	if err != nil {
		if ctx.Err() == nil {
			e.renewFailing.Store(true)
			e.metrics.storeErrors.Inc()
			e.log.Warn("renew leases; retrying", "error", err.Error())
		}
		return
	}
	e.renewFailing.Store(false)
	e.mu.Lock()
	defer e.mu.Unlock()
	extended, kept := make(map[string]bool, len(renewed)), make(map[string]bool, len(held))
	for _, id := range renewed {
		extended[id] = true
	}
	for _, id := range held {
		kept[id] = true
	}
	for _, id := range ids {
		j := e.jobs[id]
		switch {
		case j == nil || j.parked:
		case extended[id]:
			j.leaseUntil = e.localLease(sent)
		case !kept[id] && j.heldSince.Before(sent):
			// Held since before this renewal was sent, and no longer held:
			// another process took it, or it left the automated path.
			j.lost = true
		}
	}
}

// renewOwn renews j's lease before its call starts while renewals are
// failing: a call started on a lease that cannot be renewed would be
// stopped for it and cost an attempt for nothing. It fails while the store
// does, and the step is tried again.
func (e *Engine) renewOwn(ctx context.Context, j *job) error {
	if !e.renewFailing.Load() {
		return nil
	}
	renewed, _, err := e.renewOne(ctx, j)
	if err != nil {
		return fmt.Errorf("renew the lease before a call: %w", err)
	}
	e.renewFailing.Store(false)
	if !renewed {
		return errLeaseShort
	}
	return nil
}

// renewOne renews the lease of j alone, and reports whether it was
// extended (j's lease with it) and whether this process still holds the
// record (extended, or being written at the moment: left unextended).
func (e *Engine) renewOne(ctx context.Context, j *job) (renewed, held bool, err error) {
	sent := e.clock.Now()
	ext, kept, err := e.store.Renew(ctx, e.cfg.Owner, []string{j.id}, sent.Add(e.cfg.Lease))
	if err != nil {
		return false, false, err
	}
	if len(ext) == 1 {
		e.mu.Lock()
		j.leaseUntil = e.localLease(sent)
		e.mu.Unlock()
	}
	return len(ext) == 1, len(ext) == 1 || slices.Contains(kept, j.id), nil
}

// stopLapsedCalls stops the calls of reviews whose lease this process
// could not renew in time, or found taken.
func (e *Engine) stopLapsedCalls() {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.clock.Now()
	for _, j := range e.jobs {
		if !j.parked && j.cancelCall != nil && (j.lost || now.After(j.leaseUntil)) {
			e.metrics.leasesLost.Inc()
			j.cancelCall(errLeaseLost)
			j.cancelCall = nil
		}
	}
}

// takeSlot waits for a call slot for j; false when the engine stops first.
func (e *Engine) takeSlot(j *job) bool {
	if e.tryTakeSlot(j) {
		return true
	}
	select {
	case e.calls <- struct{}{}:
		j.slot = true
		return true
	case <-e.stopping.Done():
		return false
	}
}

// tryTakeSlot takes a call slot for j if one is free now.
func (e *Engine) tryTakeSlot(j *job) bool {
	if j.slot {
		return true
	}
	select {
	case e.calls <- struct{}{}:
		j.slot = true
		return true
	default:
		return false
	}
}

func (e *Engine) releaseSlot(j *job) {
	e.releaseBreaker(j)
	if j.slot {
		j.slot = false
		<-e.calls
	}
}
