package engine

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/api/engine/provider"
	"github.com/reviewledger/reviewledger/api/engine/work"
	"github.com/reviewledger/reviewledger/api/engine/work/memwork"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/memstore"
)

// claimsAfterPark runs claim once, right after the first batch that parks
// a review is stored and before its writer learns so: the moment between
// a park's commit and the job parking in memory.
type claimsAfterPark struct {
	*memwork.Store
	claim   func()
	claimed atomic.Bool
}

func (c *claimsAfterPark) Commit(ctx context.Context, appends []eventstore.StreamAppend, effects []*work.Change) ([]eventstore.StreamResult, error) {
	results, err := c.Store.Commit(ctx, appends, effects)
	if err != nil {
		return results, err
	}
	for _, ef := range effects {
		if ef != nil && ef.Op == work.Park && c.claimed.CompareAndSwap(false, true) {
			c.claim()
			break
		}
	}
	return results, nil
}

// heldAtCall fails every review's first attempt (503) and accepts the
// later ones; it counts the calls made while the engine did not hold the
// review's record. during, when set, runs inside the first call.
type heldAtCall struct {
	store         *memwork.Store
	owner         func() string
	during        func(reviewID string)
	calls, unheld atomic.Int64
}

func (p *heldAtCall) Call(_ context.Context, req provider.Request) provider.Result {
	p.calls.Add(1)
	if rec, ok := p.store.Record(req.ReviewID); !ok || rec.Owner != p.owner() {
		p.unheld.Add(1)
	}
	if req.Attempt == 1 {
		if p.during != nil {
			p.during(req.ReviewID)
		}
		return provider.Failure(domain.ClassProviderUnavailable, "http 503")
	}
	return provider.Result{Outcome: provider.OutcomeFinding, Finding: domain.Finding{ReviewID: req.ReviewID, Attempt: req.Attempt, State: domain.DecisionAccepted}}
}

// reclaimEngine is an engine whose lease is a minute and whose poll and
// sweeper run once an hour (the tests claim when they choose): a review
// left held by it and worked by none would stay so far beyond the tests'
// limits. Class c's reviews have budget; the sweeper takes them once it
// has passed.
func reclaimEngine(t *testing.T, events eventstore.Store, store work.Store, prov provider.Provider, budget time.Duration) (*Engine, *ledger.Ledger) {
	t.Helper()
	led := ledger.New(events, ledger.Options{Committer: store})
	policy := domain.Policy{Classes: map[string]domain.ClassPolicy{"c": {
		Budget: budget, AttemptTimeout: min(5*time.Second, budget/3), MaxAttempts: 3,
		Backoff:      domain.Backoff{Initial: 10 * time.Millisecond, Max: 20 * time.Millisecond},
		OnExhaustion: domain.ExhaustToManualReview, Priority: 1,
	}}}
	e := workingEngine(t, Config{Policy: policy, Store: store, Ledger: led, Provider: prov, Lease: time.Minute, PollInterval: time.Hour,
		SweepInterval: time.Hour, SweepGrace: time.Millisecond})
	return e, led
}

// calledTwiceHeld wants the failing first attempt and its retry, both
// made while this process held the review's record.
func calledTwiceHeld(t *testing.T, prov *heldAtCall) {
	t.Helper()
	if n, unheld := prov.calls.Load(), prov.unheld.Load(); n != 2 || unheld != 0 {
		t.Errorf("the provider was called %d times, %d of them for a record not held; want 2 (the failure, then the retry), none unheld", n, unheld)
	}
}

// A parked record claimed back by the process's own poll in the moment
// between the park's commit and the job parking in memory is worked at
// once: not held by this process and worked by none until its lease (a
// minute here) ends. So too when the renewal that finds it held leaves
// it unextended, as a record being written at the moment may be.
func TestAParkClaimedBeforeItsJobParksIsWorked(t *testing.T) {
	for _, unextended := range []bool{false, true} {
		t.Run(fmt.Sprintf("unextended=%v", unextended), func(t *testing.T) {
			ctx := context.Background()
			events := memstore.New()
			var e *Engine
			id := fmt.Sprintf("reclaim-1-%v", unextended)
			var claimedByPoll atomic.Bool
			store := &claimsAfterPark{Store: memwork.New(events)}
			store.claim = func() {
				time.Sleep(40 * time.Millisecond) // the backoff (at most 20 ms here) has passed: the record is due
				e.claimDue(ctx, 10)
				rec, ok := store.Record(id)
				claimedByPoll.Store(ok && rec.Owner == e.cfg.Owner)
			}
			var ws work.Store = store
			if unextended {
				ws = heldUnextended{store}
			}
			prov := &heldAtCall{store: store.Store, owner: func() string { return e.cfg.Owner }}
			e, led := reclaimEngine(t, events, ws, prov, 30*time.Second)
			if _, _, err := e.Submit(ctx, SubmitRequest{ReviewID: id, ContentClass: "c", Content: []byte("x")}); err != nil {
				t.Fatal(err)
			}
			waitAccepted(t, led, id, 5*time.Second)
			if !claimedByPoll.Load() {
				t.Fatal("the poll in the moment did not claim the parked record: the test proves nothing")
			}
			calledTwiceHeld(t, prov)
			clocktest.Eventually(t, "no call in flight", func() bool { return e.InFlight() == 0 })
		})
	}
}

// heldUnextended answers every renewal with the records held, none
// extended: each as if being written at the moment.
type heldUnextended struct{ *claimsAfterPark }

func (s heldUnextended) Renew(ctx context.Context, owner string, reviewIDs []string, _ time.Time) ([]string, []string, error) {
	var held []string
	for _, id := range reviewIDs {
		if rec, ok := s.Record(id); ok && rec.Owner == owner {
			held = append(held, id)
		}
	}
	return nil, held, ctx.Err()
}

// slowRenew renews leases 30 ms late: past the backoff of the reviews
// whose park it is asked about.
type slowRenew struct{ *memwork.Store }

func (s slowRenew) Renew(ctx context.Context, owner string, reviewIDs []string, until time.Time) ([]string, []string, error) {
	time.Sleep(30 * time.Millisecond)
	return s.Store.Renew(ctx, owner, reviewIDs, until)
}

// A claim that took the record while its job was worked, before the job
// committed its park (the lease had lapsed and the claim renewed it),
// leaves the job to park as planned: the park gave the record up, and no
// call is made for a record this process does not hold.
func TestAClaimBeforeAParkLeavesTheJobParked(t *testing.T) {
	ctx := context.Background()
	events := memstore.New()
	store := memwork.New(events)
	var e *Engine
	prov := &heldAtCall{store: store, owner: func() string { return e.cfg.Owner }}
	prov.during = func(id string) {
		rec, ok := store.Record(id)
		if !ok {
			t.Error("no record while the first attempt runs")
			return
		}
		now := e.clock.Now()
		e.takeOne(work.Claimed{Record: rec}, now, false, nil)
	}
	// By the time the job learns it does not hold the record, the record
	// is due: a job that went on would start the next attempt unheld.
	e, led := reclaimEngine(t, events, slowRenew{store}, prov, 30*time.Second)
	if _, _, err := e.Submit(ctx, SubmitRequest{ReviewID: "reclaim-2", ContentClass: "c", Content: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	waitAccepted(t, led, "reclaim-2", 5*time.Second)
	calledTwiceHeld(t, prov)
	clocktest.Eventually(t, "no call in flight", func() bool { return e.InFlight() == 0 })
}

// A park the deadline sweeper claims back before its job parks in memory
// is swept by the job that goes on: escalated as past its deadline by the
// sweeper, as a parked review would be, not as an exhausted budget.
func TestAParkSweptBeforeItsJobParksIsEscalatedByTheSweeper(t *testing.T) {
	ctx := context.Background()
	events := memstore.New()
	var e *Engine
	var swept atomic.Int64
	store := &claimsAfterPark{Store: memwork.New(events)}
	store.claim = func() {
		time.Sleep(350 * time.Millisecond) // past the review's deadline (a 300 ms budget)
		n, err := e.Sweep(ctx)
		if err != nil {
			t.Error(err)
		}
		swept.Add(int64(n))
	}
	prov := &heldAtCall{store: store.Store, owner: func() string { return e.cfg.Owner }}
	e, led := reclaimEngine(t, events, store, prov, 300*time.Millisecond)
	if _, _, err := e.Submit(ctx, SubmitRequest{ReviewID: "reclaim-3", ContentClass: "c", Content: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	clocktest.Eventually(t, "reclaim-3 in manual_review", func() bool {
		rv, err := led.Load(ctx, "reclaim-3")
		return err == nil && rv.State() == domain.StateManualReview
	})
	if swept.Load() != 1 {
		t.Fatalf("the sweep in the moment took %d records, want the parked one: the test proves nothing", swept.Load())
	}
	rv, err := led.Load(ctx, "reclaim-3")
	if err != nil {
		t.Fatal(err)
	}
	if rv.EscalationReason() != domain.ReasonDeadlinePassed {
		t.Errorf("escalated as %s, want %s (by the sweeper)", rv.EscalationReason(), domain.ReasonDeadlinePassed)
	}
	if n := prov.calls.Load(); n != 1 {
		t.Errorf("the provider was called %d times, want once (no attempt past the deadline)", n)
	}
	clocktest.Eventually(t, "no call in flight", func() bool { return e.InFlight() == 0 })
}
