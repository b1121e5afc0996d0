package engine

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/api/engine/work"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
)

// startLost appends an AttemptStarted as an owner that then dies would:
// the attempt stays open, the record keeps the dead owner's lease until it
// expires.
func (h *harness) startLost(t *testing.T, id string) {
	t.Helper()
	ctx := context.Background()
	now := h.clock.Now()
	claimed, err := h.store.Claim(ctx, work.Query{Owner: "dead-owner", LeaseUntil: now.Add(time.Second), Now: now, IDs: []string{id}})
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim as the dead owner: %v, %v", claimed, err)
	}
	rv := h.load(t, id)
	st, err := rv.StartAttempt(now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.ledger.Append(ctx, rv, actorEngine, st); err != nil {
		t.Fatal(err)
	}
}

// An attempt left open by an owner that died is closed as worker_lost as
// soon as the owner's lease has expired (not when the attempt's timeout
// would have), then retried.
func TestLostAttemptIsClosed(t *testing.T) {
	t.Parallel()
	h := newHarness(t, []step{finding("rev-w", domain.DecisionAccepted)})
	h.submit(t, "rev-w", "c")
	h.startLost(t, "rev-w")
	if h.workOnce(t, "rev-w") {
		t.Fatal("a review held by a live lease was taken")
	}
	h.clock.Advance(time.Second + time.Millisecond) // the dead owner's lease ends
	rv := h.drive(t, "rev-w")
	want := []string{"Submitted", "AttemptStarted", "AttemptTimedOut:worker_lost", "AttemptStarted", "FindingReceived:accepted:response"}
	if got := h.types(t, "rev-w"); !slices.Equal(got, want) || rv.State() != domain.StateAccepted {
		t.Fatalf("events %v, want %v", got, want)
	}
	if lost := h.events(t, "rev-w")[2].(domain.AttemptTimedOut); lost.ElapsedMS >= 2000 {
		t.Errorf("the lost attempt was closed after %dms: it waited for its timeout", lost.ElapsedMS)
	}
}

// Retrying an attempt lost with its worker is recovery: the retry budget
// does not refuse it, even when spent.
func TestRecoveryIsNotChargedToTheRetryBudget(t *testing.T) {
	t.Parallel()
	h := newHarness(t, []step{finding("rev-rec", domain.DecisionAccepted)}, func(c *Config) {
		c.RetryBudget, c.RetryBudgetMinRetries = 0.01, 1
	})
	if !h.upstreams[domain.DefaultProvider].budget.take(h.clock.Now()) || h.upstreams[domain.DefaultProvider].budget.take(h.clock.Now()) {
		t.Fatal("the budget should allow one retry, then none")
	}
	h.submit(t, "rev-rec", "c")
	h.startLost(t, "rev-rec")
	h.clock.Advance(2 * time.Second)
	h.drive(t, "rev-rec")
	want := []string{"Submitted", "AttemptStarted", "AttemptTimedOut:worker_lost", "AttemptStarted", "FindingReceived:accepted:response"}
	if got := h.types(t, "rev-rec"); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
}

func TestSweeperEscalatesPastDeadline(t *testing.T) {
	t.Parallel()
	h := newHarness(t, []step{hang})
	h.submit(t, "rev-old", "short") // deadline +3s
	h.submit(t, "rev-new", "c")     // deadline +10s
	ctx := context.Background()
	h.clock.Advance(3*time.Second + 400*time.Millisecond) // inside the grace
	if n, err := h.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("Sweep in grace = %d, %v", n, err)
	}
	h.clock.Advance(200 * time.Millisecond)
	if n, err := h.Sweep(ctx); err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v; want 1", n, err)
	}
	rv := h.load(t, "rev-old")
	if rv.State() != domain.StateManualReview || rv.EscalationReason() != domain.ReasonDeadlinePassed {
		t.Fatalf("rev-old: %s %s", rv.State(), rv.EscalationReason())
	}
	if h.load(t, "rev-new").State() != domain.StatePending {
		t.Fatal("rev-new swept before its deadline")
	}
	if n, _ := h.Sweep(ctx); n != 0 {
		t.Fatalf("second sweep took %d", n)
	}
	if n := h.counter(t, h.metrics.swept); n != 1 {
		t.Errorf("swept counted %v, want 1", n)
	}
	if len(h.prov.Requests()) != 0 {
		t.Errorf("the provider was called %d times", len(h.prov.Requests()))
	}
	// A record whose review never came to exist (a submission that did not
	// get as far as its stream, on a ledger outside the database) is left
	// until its deadline, then cleared.
	if _, err := h.store.Ensure(ctx, "ghost", h.clock.Now().Add(time.Second), h.clock.Now()); err != nil {
		t.Fatal(err)
	}
	h.workOnce(t, "ghost")
	if _, ok := h.mem.Record("ghost"); !ok {
		t.Fatal("a worker cleared a submission that may be in progress")
	}
	h.clock.Advance(2 * time.Second)
	if _, err := h.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := h.mem.Record("ghost"); ok {
		t.Fatal("the sweeper left a stale record")
	}
}

// A review whose owner died mid-attempt is escalated by the sweeper with
// its open attempt closed as worker_lost first, in the same append: the
// attempt never stays without an outcome. A callback wait past the
// deadline is closed as deadline_exceeded.
func TestSweeperClosesTheOpenAttempt(t *testing.T) {
	t.Parallel()
	h := newPGHarness(t, []step{async})
	ctx := context.Background()
	h.submit(t, "rev-dead", "closed") // fail closed: deadline_passed rejects
	h.clock.Advance(time.Second)
	h.startLost(t, "rev-dead")
	h.submit(t, "rev-waiting", "c")
	h.workOnce(t, "rev-waiting") // 202: parked awaiting the callback
	policy := testPolicy().Classes["closed"]
	h.clock.Advance(policy.Budget + time.Second)
	if n, err := h.Sweep(ctx); err != nil || n != 2 {
		t.Fatalf("Sweep = %d, %v; want 2", n, err)
	}

	want := []string{"Submitted", "AttemptStarted", "AttemptTimedOut:worker_lost", "Escalated:deadline_passed"}
	if got := h.types(t, "rev-dead"); !slices.Equal(got, want) {
		t.Fatalf("rev-dead: events %v, want %v", got, want)
	}
	hist, err := h.ledger.History(ctx, "rev-dead")
	if err != nil {
		t.Fatal(err)
	}
	closed, esc := hist.Events[2], hist.Events[3]
	if closed.Metadata.Actor != "sweeper" || esc.Metadata.Actor != "sweeper" {
		t.Errorf("actors %q, %q; want sweeper", closed.Metadata.Actor, esc.Metadata.Actor)
	}
	started := hist.Events[1].Event.(domain.AttemptStarted).StartedAt
	if to := closed.Event.(domain.AttemptTimedOut); to.Attempt != 1 || to.ElapsedMS != h.clock.Now().Sub(started).Milliseconds() {
		t.Errorf("closed attempt %+v, want attempt 1 after %s", to, h.clock.Now().Sub(started))
	}
	// One append: one transaction in the store's global order.
	recs, err := h.ledger.Store().ReadStream(ctx, domain.StreamName("rev-dead"), 2)
	if err != nil || len(recs) != 2 || recs[0].Position.Commit != recs[1].Position.Commit {
		t.Errorf("the timeout and the escalation were not one append: %+v, %v", recs, err)
	}
	if rv := h.load(t, "rev-dead"); rv.State() != domain.StateRejected {
		t.Errorf("rev-dead: %s, want rejected (fail closed)", rv.State())
	}
	if n := h.counter(t, h.metrics.attempts.WithLabelValues(string(domain.ClassWorkerLost))); n != 1 {
		t.Errorf("worker_lost attempts counted %v, want 1", n)
	}
	want = []string{"Submitted", "AttemptStarted", "AttemptTimedOut:deadline_exceeded", "Escalated:deadline_passed"}
	if got := h.types(t, "rev-waiting"); !slices.Equal(got, want) {
		t.Fatalf("rev-waiting: events %v, want %v", got, want)
	}
}

// RunSweeper sweeps only while its SweepLeader has elected it, and works
// nothing else: a past-deadline review waits while another process would
// hold the election, and is escalated once this one is elected. The
// sweeper_active gauge says which.
func TestRunSweeperSweepsOnlyWhileElected(t *testing.T) {
	t.Parallel()
	elected := make(chan struct{})
	asked := make(chan struct{}, 1) // the sweeper stands for election
	leader := func(ctx context.Context, fn func(context.Context) error) error {
		select {
		case asked <- struct{}{}:
		default:
		}
		select {
		case <-elected:
			return fn(ctx)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	h := newHarness(t, []step{hang}, func(c *Config) { c.SweepLeader = leader })
	h.submit(t, "rev-swept", "short") // deadline +3s
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.RunSweeper(ctx) }()
	h.clock.Advance(10 * time.Second)
	<-asked // the sweeper waits for its election: nothing else of it runs
	if st := h.load(t, "rev-swept").State(); st != domain.StatePending {
		t.Fatalf("swept while not elected: %s", st)
	}
	if g := h.counter(t, h.metrics.sweeperActive); g != 0 {
		t.Fatalf("sweeper_active %v while not elected", g)
	}
	close(elected)
	clocktest.Eventually(t, "rev-swept swept once elected", func() bool { return h.load(t, "rev-swept").State() != domain.StatePending })
	if rv := h.load(t, "rev-swept"); rv.EscalationReason() != domain.ReasonDeadlinePassed {
		t.Errorf("escalated as %s, want deadline_passed", rv.EscalationReason())
	}
	if g := h.counter(t, h.metrics.sweeperActive); g != 1 {
		t.Errorf("sweeper_active %v while elected", g)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if g := h.counter(t, h.metrics.sweeperActive); g != 0 {
		t.Errorf("sweeper_active %v after the stop", g)
	}
	if n := len(h.prov.Requests()); n != 0 {
		t.Errorf("a sweeper-only engine called the provider %d times", n)
	}
	if h.works.Load() {
		t.Error("a sweeper-only engine takes work")
	}
}
