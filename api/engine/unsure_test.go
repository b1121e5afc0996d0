package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
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

// unsureCommits fails the first batch holding an event of type failOn as
// a whole, having written it (store) or not: a batch whose outcome its
// writer never learns, as when the connection is lost before the commit's
// answer, or a later stream of the batch fails after earlier ones were
// committed.
type unsureCommits struct {
	*memwork.Store
	failOn    string
	without   string // not a batch also holding an event of this type
	store     bool
	failed    atomic.Bool
	meanwhile func() // run as the batch fails, when set
}

func (c *unsureCommits) Commit(ctx context.Context, appends []eventstore.StreamAppend, effects []*work.Change) ([]eventstore.StreamResult, error) {
	found, excluded := false, false
	for _, a := range appends {
		for _, ev := range a.Events {
			found = found || ev.Type == c.failOn
			excluded = excluded || ev.Type == c.without
		}
	}
	if !found || excluded || c.failed.Load() {
		return c.Store.Commit(ctx, appends, effects)
	}
	c.failed.Store(true)
	if c.store {
		if _, err := c.Store.Commit(ctx, appends, effects); err != nil {
			return nil, err
		}
	}
	if c.meanwhile != nil {
		c.meanwhile()
	}
	return nil, errFlaky
}

// A step whose write failed without telling whether it was stored learns
// which before it plans again: stored, the review carries on from it;
// not, the step is written again. Either way the engine's own finding is
// recorded once and never taken for another writer's (no conflicting
// completion).
func TestAnUnsureStepWriteIsLearnedNotTakenForAConflict(t *testing.T) {
	for _, stored := range []bool{true, false} {
		t.Run(fmt.Sprintf("stored=%v", stored), func(t *testing.T) {
			events := memstore.New()
			store := &unsureCommits{Store: memwork.New(events), failOn: domain.TypeFindingReceived, store: stored}
			e, led := unsureEngine(t, events, store)
			ctx := context.Background()
			if _, _, err := e.Submit(ctx, SubmitRequest{ReviewID: "unsure-1", ContentClass: "c", Content: []byte("x")}); err != nil {
				t.Fatal(err)
			}
			waitNoWork(t, e, nil)
			clocktest.Eventually(t, "no call in flight", func() bool { return e.InFlight() == 0 }) // the step retried, its goroutine done
			if !store.failed.Load() {
				t.Fatal("no batch with a finding was failed: the test proves nothing")
			}
			rv, err := led.Load(ctx, "unsure-1")
			if err != nil {
				t.Fatal(err)
			}
			if rv.State() != domain.StateAccepted {
				t.Fatalf("review ended %s, want accepted", rv.State())
			}
			findings := 0
			for _, typ := range eventTypes(t, led, "unsure-1") {
				if strings.HasPrefix(typ, domain.TypeFindingReceived) {
					findings++
				}
			}
			if findings != 1 {
				t.Errorf("%d FindingReceived stored, want 1: %v", findings, eventTypes(t, led, "unsure-1"))
			}
			conflicts, err := led.Conflicts(ctx, "unsure-1")
			if err != nil {
				t.Fatal(err)
			}
			if len(conflicts.Events) != 0 {
				t.Errorf("the engine's own finding was logged as %d conflicting completion(s): %+v", len(conflicts.Events), conflicts.Events[0].Event)
			}
		})
	}
}

// unsureEngine is an engine over events whose group commits store writes,
// working reviews (a submit is owned by it when it has room).
func unsureEngine(t *testing.T, events eventstore.Store, store *unsureCommits) (*Engine, *ledger.Ledger) {
	return unsureEngineWith(t, events, store, &overlapWatch{latency: time.Millisecond, inFlight: map[string]int{}, calls: map[string]int{}})
}

func unsureEngineWith(t *testing.T, events eventstore.Store, store *unsureCommits, prov provider.Provider) (*Engine, *ledger.Ledger) {
	return unsureEngineTimed(t, events, store, prov, 5*time.Second)
}

func unsureEngineTimed(t *testing.T, events eventstore.Store, store *unsureCommits, prov provider.Provider, attemptTimeout time.Duration) (*Engine, *ledger.Ledger) {
	t.Helper()
	led := ledger.New(events, ledger.Options{Committer: store})
	policy := domain.Policy{Classes: map[string]domain.ClassPolicy{"c": {
		Budget: 30 * time.Second, AttemptTimeout: attemptTimeout, MaxAttempts: 3,
		Backoff:      domain.Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond},
		OnExhaustion: domain.ExhaustToManualReview, Priority: 1,
	}}}
	e := workingEngine(t, Config{Policy: policy, Store: store, Ledger: led, Provider: prov,
		Lease: time.Minute, PollInterval: 20 * time.Millisecond})
	return e, led
}

// A submit whose write failed without telling whether it was stored
// learns which: stored, it is answered as created and the review is
// worked at once (not left owned by this process and worked by none until
// its lease ends); not stored, it is an error and nothing exists.
func TestAnUnsureSubmitIsLearned(t *testing.T) {
	ctx := context.Background()
	t.Run("stored", func(t *testing.T) {
		events := memstore.New()
		store := &unsureCommits{Store: memwork.New(events), failOn: domain.TypeSubmitted, store: true}
		e, led := unsureEngine(t, events, store)
		_, created, err := e.Submit(ctx, SubmitRequest{ReviewID: "unsure-s1", ContentClass: "c", Content: []byte("x")})
		if err != nil || !created {
			t.Fatalf("Submit = created %v, %v; want created", created, err)
		}
		if !store.failed.Load() {
			t.Fatal("the submit's batch was not failed: the test proves nothing")
		}
		// Within a second, where the lease (a minute) would hold it.
		clocktest.Within(t, time.Second, "unsure-s1 accepted, within a second where the lease (a minute) would hold it", func() bool {
			rv, err := led.Load(ctx, "unsure-s1")
			return err == nil && rv.State() == domain.StateAccepted
		})
	})
	t.Run("not stored", func(t *testing.T) {
		events := memstore.New()
		store := &unsureCommits{Store: memwork.New(events), failOn: domain.TypeSubmitted}
		e, led := unsureEngine(t, events, store)
		if _, _, err := e.Submit(ctx, SubmitRequest{ReviewID: "unsure-s2", ContentClass: "c", Content: []byte("x")}); !errors.Is(err, errFlaky) {
			t.Fatalf("Submit = %v, want the batch's error", err)
		}
		if _, err := led.Load(ctx, "unsure-s2"); !errors.Is(err, domain.ErrReviewNotFound) {
			t.Fatalf("Load = %v, want no review", err)
		}
		if n, err := store.Count(ctx); err != nil || n != 0 {
			t.Fatalf("%d work records (%v), want none", n, err)
		}
	})
}

// A submit left unsure whose review another write created meanwhile (the
// same submission from another process) is answered as a resubmit.
func TestAnUnsureSubmitOfAReviewCreatedMeanwhile(t *testing.T) {
	ctx := context.Background()
	events := memstore.New()
	store := &unsureCommits{Store: memwork.New(events), failOn: domain.TypeSubmitted}
	e, led := unsureEngine(t, events, store)
	req := SubmitRequest{ReviewID: "unsure-s3", ContentClass: "c", Content: []byte("x")}
	store.meanwhile = func() {
		other := ledger.New(events)
		ev, err := domain.Submit(domain.SubmitCommand{ReviewID: req.ReviewID, ContentClass: "c", PayloadDigest: Digest(req.Content),
			PayloadBytes: 1, Policy: e.cfg.Policy.Classes["c"], Now: time.Now()})
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := other.Create(context.WithoutCancel(ctx), ev, ledger.Actor{Name: "platform"}); err != nil {
			t.Error(err)
		}
	}
	_, created, err := e.Submit(ctx, req)
	if err != nil || created {
		t.Fatalf("Submit = created %v, %v; want the review created meanwhile, as a resubmit", created, err)
	}
	// The resubmit made sure of its work record (the other write had none),
	// and the review went on from there.
	clocktest.Eventually(t, "the review decided", func() bool {
		rv, err := led.Load(ctx, req.ReviewID)
		return err == nil && rv.Version() > 0
	})
}

// failsFirst fails every review's first attempt as the provider being
// unavailable, and accepts the later ones.
type failsFirst struct{ calls atomic.Int64 }

func (p *failsFirst) Call(_ context.Context, req provider.Request) provider.Result {
	p.calls.Add(1)
	if req.Attempt == 1 {
		return provider.Failure(domain.ClassProviderUnavailable, "http 503")
	}
	return provider.Result{Outcome: provider.OutcomeFinding, Finding: domain.Finding{ReviewID: req.ReviewID, Attempt: req.Attempt, State: domain.DecisionAccepted}}
}

// A step that started an attempt, its write stored but left unsure, makes
// the attempt's call once it learns so: the attempt is not left to time
// out and a third one started.
func TestAnUnsureAttemptStartIsCalled(t *testing.T) {
	ctx := context.Background()
	events := memstore.New()
	store := &unsureCommits{Store: memwork.New(events), failOn: domain.TypeAttemptStarted, without: domain.TypeSubmitted, store: true}
	prov := &failsFirst{}
	e, led := unsureEngineWith(t, events, store, prov)
	if _, _, err := e.Submit(ctx, SubmitRequest{ReviewID: "unsure-a1", ContentClass: "c", Content: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	waitAccepted(t, led, "unsure-a1", 5*time.Second)
	if !store.failed.Load() {
		t.Fatal("no batch starting a later attempt was failed: the test proves nothing")
	}
	var started, timedOut int
	for _, typ := range eventTypes(t, led, "unsure-a1") {
		started += strings.Count(typ, domain.TypeAttemptStarted)
		timedOut += strings.Count(typ, domain.TypeAttemptTimedOut+":"+string(domain.ClassDeadlineExceeded))
	}
	if started != 2 || timedOut != 0 || prov.calls.Load() != 2 {
		t.Fatalf("%d attempts started, %d past their timeout, %d calls; want 2, 0, 2: %v", started, timedOut, prov.calls.Load(), eventTypes(t, led, "unsure-a1"))
	}
}

// lateFirst answers every review's first attempt with a finding once the
// attempt's timeout has passed (its context ended at it), heedless of
// that; the later ones at once.
type lateFirst struct{}

func (lateFirst) Call(ctx context.Context, req provider.Request) provider.Result {
	if req.Attempt == 1 {
		<-ctx.Done()
	}
	return provider.Result{Outcome: provider.OutcomeFinding, Finding: domain.Finding{ReviewID: req.ReviewID, Attempt: req.Attempt, State: domain.DecisionAccepted}}
}

// A step whose conclusion refused a late finding logs that conflicting
// completion once its write, left unsure, is learned to be stored. The
// write parked the review's record, which this process's own poll claimed
// again while the step waited to learn: the review is parked again and
// goes on at once, not a lease (a minute) later.
func TestAnUnsureStepLogsTheFindingItRefused(t *testing.T) {
	ctx := context.Background()
	events := memstore.New()
	store := &unsureCommits{Store: memwork.New(events), failOn: domain.TypeAttemptTimedOut, store: true}
	e, led := unsureEngineTimed(t, events, store, lateFirst{}, 100*time.Millisecond)
	if _, _, err := e.Submit(ctx, SubmitRequest{ReviewID: "unsure-l1", ContentClass: "c", Content: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	waitAccepted(t, led, "unsure-l1", 5*time.Second)
	clocktest.Eventually(t, "no call in flight", func() bool { return e.InFlight() == 0 })
	if !store.failed.Load() {
		t.Fatal("no batch closing an attempt was failed: the test proves nothing")
	}
	conflicts, err := led.Conflicts(ctx, "unsure-l1")
	if err != nil {
		t.Fatal(err)
	}
	if len(conflicts.Events) != 1 {
		t.Fatalf("%d conflicting completions logged, want the late finding's: %+v", len(conflicts.Events), conflicts.Events)
	}
	if c, ok := conflicts.Events[0].Event.(domain.ConflictingCompletionRecorded); !ok || c.Reason != domain.ConflictAttemptNotInFlight {
		t.Fatalf("logged %+v, want the late finding refused (attempt not in flight)", conflicts.Events[0].Event)
	}
}

// refusedThenFlaky refuses every review's first attempt (400: escalated),
// fails its second (503) and accepts the later ones.
type refusedThenFlaky struct{ calls atomic.Int64 }

func (p *refusedThenFlaky) Call(_ context.Context, req provider.Request) provider.Result {
	p.calls.Add(1)
	switch req.Attempt {
	case 1:
		return provider.Failure(domain.ClassProviderRefused, "http 400")
	case 2:
		return provider.Failure(domain.ClassProviderUnavailable, "http 503")
	}
	return provider.Result{Outcome: provider.OutcomeFinding, Finding: domain.Finding{ReviewID: req.ReviewID, Attempt: req.Attempt, State: domain.DecisionAccepted}}
}

// A stored unsure escalation whose review a moderator requeued before the
// step learned of it leaves the new round's work record alone (a release
// made again would delete it, and the round would be worked by none).
func TestAnUnsureReleaseLeavesARequeuedRoundsRecord(t *testing.T) {
	ctx := context.Background()
	events := memstore.New()
	store := &unsureCommits{Store: memwork.New(events), failOn: domain.TypeEscalated, store: true}
	store.meanwhile = func() {
		moderator := ledger.New(events, ledger.Options{Committer: store.Store})
		snap, err := moderator.Load(context.WithoutCancel(ctx), "unsure-r1")
		if err != nil {
			t.Error(err)
			return
		}
		ev, err := snap.Requeue(domain.RequeueCommand{By: "mod", ExpectedVersion: snap.Version()}, time.Now())
		if err != nil {
			t.Error(err)
			return
		}
		reopen := work.Change{Op: work.Reopen, ReviewID: "unsure-r1", Deadline: ev.Deadline, At: time.Now()}
		if _, err := moderator.Write(context.WithoutCancel(ctx), snap, ledger.Actor{Name: "mod"}, ledger.Step{Events: []domain.Event{ev}, Work: &reopen}); err != nil {
			t.Error(err)
		}
	}
	e, led := unsureEngineWith(t, events, store, &refusedThenFlaky{})
	if _, _, err := e.Submit(ctx, SubmitRequest{ReviewID: "unsure-r1", ContentClass: "c", Content: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	waitAccepted(t, led, "unsure-r1", 5*time.Second)
	if !store.failed.Load() {
		t.Fatal("no escalation's batch was failed: the test proves nothing")
	}
}

// A submit whose unsure write was stored, but learned only after the
// lease it was written with ran out, is not worked here: another process
// may hold the record by then, and two would call the provider at once.
func TestAnUnsureSubmitPastItsLeaseIsNotWorkedHere(t *testing.T) {
	// On synctest's clock: the slow write's sleep is exactly as long as
	// it says against the lease, whatever the machine's load.
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		events := memstore.New()
		mem := memwork.New(events)
		store := &unsureCommits{Store: mem, failOn: domain.TypeSubmitted, store: true, meanwhile: func() { time.Sleep(600 * time.Millisecond) }}
		prov := &overlapWatch{latency: 900 * time.Millisecond, inFlight: map[string]int{}, calls: map[string]int{}}
		policy := domain.Policy{Classes: map[string]domain.ClassPolicy{"c": {
			Budget: 30 * time.Second, AttemptTimeout: 5 * time.Second, MaxAttempts: 3,
			Backoff:      domain.Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond},
			OnExhaustion: domain.ExhaustToManualReview, Priority: 1,
		}}}
		engine := func(owner string, s work.Store) (*Engine, *ledger.Ledger) {
			led := ledger.New(events, ledger.Options{Committer: s})
			return workingEngine(t, Config{Policy: policy, Store: s, Ledger: led, Provider: prov, Owner: owner,
				Lease: 200 * time.Millisecond, PollInterval: 20 * time.Millisecond}), led
		}
		a, led := engine("A", store)
		engine("B", mem)
		if _, created, err := a.Submit(ctx, SubmitRequest{ReviewID: "unsure-p1", ContentClass: "c", Content: []byte("x")}); err != nil || !created {
			t.Fatalf("Submit = created %v, %v; want created", created, err)
		}
		waitAccepted(t, led, "unsure-p1", 10*time.Second)
		prov.mu.Lock()
		defer prov.mu.Unlock()
		if len(prov.overlaps) > 0 {
			t.Fatalf("the provider was called twice at once: %v (%v)", prov.overlaps, eventTypes(t, led, "unsure-p1"))
		}
	})
}

// waitAccepted waits up to limit for review id to be accepted.
func waitAccepted(t *testing.T, led *ledger.Ledger, id string, limit time.Duration) {
	t.Helper()
	clocktest.Within(t, limit, id+" accepted", func() bool {
		rv, err := led.Load(context.Background(), id)
		return err == nil && rv.State() == domain.StateAccepted
	})
}

// attempts records the attempt number and the time left of every call.
type attempts struct {
	mu    sync.Mutex
	calls []string
}

func (p *attempts) Call(_ context.Context, req provider.Request) provider.Result {
	p.mu.Lock()
	p.calls = append(p.calls, fmt.Sprintf("attempt %d, %v left", req.Attempt, req.Timeout > 0))
	p.mu.Unlock()
	return provider.Result{Outcome: provider.OutcomeFinding, Finding: domain.Finding{ReviewID: req.ReviewID, Attempt: req.Attempt, State: domain.DecisionAccepted}}
}

func (p *attempts) made() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprint(p.calls)
}

// A submit whose unsure write was stored and learned once its lease had
// run out, the record still this process's, renews the lease and works
// the review: its first attempt is called, not left to be closed as lost.
func TestAnUnsureSubmitPastItsLeaseRenewsIt(t *testing.T) {
	// On synctest's clock: the slow write's sleep is exactly as long as
	// it says against the lease, whatever the machine's load.
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		events := memstore.New()
		store := &unsureCommits{Store: memwork.New(events), failOn: domain.TypeSubmitted, store: true, meanwhile: func() { time.Sleep(400 * time.Millisecond) }}
		prov := &attempts{}
		led := ledger.New(events, ledger.Options{Committer: store})
		policy := domain.Policy{Classes: map[string]domain.ClassPolicy{"c": {
			Budget: 30 * time.Second, AttemptTimeout: 5 * time.Second, MaxAttempts: 3,
			Backoff:      domain.Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond},
			OnExhaustion: domain.ExhaustToManualReview, Priority: 1,
		}}}
		// The poll every 10 s: the engine's own would otherwise claim the
		// record once its lease ran out and close the attempt as lost.
		e := workingEngine(t, Config{Policy: policy, Store: store, Ledger: led, Provider: prov,
			Lease: 200 * time.Millisecond, PollInterval: 10 * time.Second})
		if _, created, err := e.Submit(ctx, SubmitRequest{ReviewID: "unsure-n1", ContentClass: "c", Content: []byte("x")}); err != nil || !created {
			t.Fatalf("Submit = created %v, %v; want created", created, err)
		}
		waitAccepted(t, led, "unsure-n1", 5*time.Second)
		if got := prov.made(); got != "[attempt 1, true left]" {
			t.Fatalf("calls %s, want attempt 1 alone: %v", got, eventTypes(t, led, "unsure-n1"))
		}
	})
}

// An attempt with nothing left of its timeout when its call would be made
// (its start learned late) is not called: it ends as the store's failure
// (store_unavailable, not the provider's timeout), and the next attempt is
// called with time of its own.
func TestAnAttemptWithNoTimeLeftIsNotCalled(t *testing.T) {
	// On synctest's clock: the slow write's sleep is exactly as long as
	// it says against the lease, whatever the machine's load.
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		events := memstore.New()
		store := &unsureCommits{Store: memwork.New(events), failOn: domain.TypeSubmitted, store: true, meanwhile: func() { time.Sleep(300 * time.Millisecond) }}
		prov := &attempts{}
		e, led := unsureEngineTimed(t, events, store, prov, 100*time.Millisecond)
		if _, _, err := e.Submit(ctx, SubmitRequest{ReviewID: "unsure-z1", ContentClass: "c", Content: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		waitAccepted(t, led, "unsure-z1", 5*time.Second)
		if got := prov.made(); got != "[attempt 2, true left]" {
			t.Fatalf("calls %s, want attempt 2 alone: %v", got, eventTypes(t, led, "unsure-z1"))
		}
		if got := eventTypes(t, led, "unsure-z1"); !slices.Contains(got, "AttemptTimedOut:store_unavailable") {
			t.Fatalf("events %v, want attempt 1 closed as store_unavailable", got)
		}
		if conflicts, err := led.Conflicts(ctx, "unsure-z1"); err != nil || len(conflicts.Events) != 0 {
			t.Fatalf("conflicts %v, %v; want none", conflicts, err)
		}
	})
}

// neverSent cuts off every first attempt before its request is sent, as a
// connection not made in the time left would (provider.Result.Unsent),
// and answers every later one.
type neverSent struct{ attempts }

func (p *neverSent) Call(ctx context.Context, req provider.Request) provider.Result {
	if req.Attempt > 1 {
		return p.attempts.Call(ctx, req)
	}
	<-ctx.Done()
	r := provider.Failure(domain.ClassDeadlineExceeded, "request cancelled before it was sent")
	r.Unsent = true
	return r
}

// An attempt whose start was learned late, with less than half its
// timeout left, and whose request could not be sent in the rest, was lost
// to the store: it is closed as store_unavailable, as one with nothing
// left is. With its whole timeout for the call, a request not sent is the
// provider's timeout (deadline_exceeded).
func TestAnAttemptCutOffBeforeItWasSentAfterALateStart(t *testing.T) {
	for _, c := range []struct {
		late time.Duration // how long its start's write took, of a 100 ms timeout
		want string
	}{
		{60 * time.Millisecond, "AttemptTimedOut:store_unavailable"},
		{40 * time.Millisecond, "AttemptTimedOut:deadline_exceeded"}, // 60 of its 100 ms for the call
		{0, "AttemptTimedOut:deadline_exceeded"},
	} {
		t.Run(fmt.Sprintf("%s late: %s", c.late, c.want), func(t *testing.T) {
			// On synctest's clock: the write takes exactly c.late.
			synctest.Test(t, func(t *testing.T) {
				events := memstore.New()
				store := &unsureCommits{Store: memwork.New(events), failOn: domain.TypeSubmitted, store: true, meanwhile: func() { time.Sleep(c.late) }}
				e, led := unsureEngineTimed(t, events, store, &neverSent{}, 100*time.Millisecond)
				if _, _, err := e.Submit(context.Background(), SubmitRequest{ReviewID: "unsent-1", ContentClass: "c", Content: []byte("x")}); err != nil {
					t.Fatal(err)
				}
				waitAccepted(t, led, "unsent-1", 5*time.Second)
				got := eventTypes(t, led, "unsent-1")
				if want := []string{"Submitted", "AttemptStarted", c.want, "AttemptStarted", "FindingReceived:accepted:response"}; !slices.Equal(got, want) {
					t.Fatalf("events %v, want %v", got, want)
				}
			})
		})
	}
}

// The time a call would have had but for the store is the upstream's cap
// when it has one: a call cut off unsent at its cap was the provider's to
// make, however late its start was learned.
func TestLostToStoreCountsTheUpstreamsCap(t *testing.T) {
	unsent := provider.Failure(domain.ClassDeadlineExceeded, "request cancelled before it was sent")
	unsent.Unsent = true
	sent := provider.Failure(domain.ClassDeadlineExceeded, "request cancelled")
	for _, c := range []struct {
		res                        provider.Result
		left, timeout, upstreamCap time.Duration
		want                       bool
	}{
		{unsent, 4 * time.Second, 10 * time.Second, 0, true},                  // the store took 6 of 10 s
		{unsent, 6 * time.Second, 10 * time.Second, 0, false},                 // the call had most of its time
		{unsent, 5 * time.Second, 10 * time.Second, 0, false},                 // exactly half: the call's
		{unsent, 4 * time.Second, 10 * time.Second, time.Second, false},       // capped at 1 s either way
		{unsent, 400 * time.Millisecond, 10 * time.Second, time.Second, true}, // 0.4 of its 1 s
		{sent, time.Millisecond, 10 * time.Second, 0, false},                  // the provider may have seen it
	} {
		if got := lostToStore(c.res, errAttemptTimeout, c.left, c.timeout, c.upstreamCap); got != c.want {
			t.Errorf("lostToStore(unsent %v, left %s of %s, cap %s) = %v, want %v", c.res.Unsent, c.left, c.timeout, c.upstreamCap, got, c.want)
		}
	}
	for _, cause := range []error{errLeaseLost, ErrShutdown} {
		if lostToStore(unsent, cause, time.Millisecond, 10*time.Second, 0) {
			t.Errorf("a call cut off by %v is not cut off by its timeout", cause)
		}
	}
}
