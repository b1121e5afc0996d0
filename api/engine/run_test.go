package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/reviewledger/reviewledger/api/engine/hint"
	"github.com/reviewledger/reviewledger/api/engine/provider"
	"github.com/reviewledger/reviewledger/api/engine/work"
	"github.com/reviewledger/reviewledger/api/engine/work/memwork"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/memstore"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// Tests of Run on the wall clock: the engine takes work by itself (hints,
// polls, timers, leases), as serve runs it.

func fastPolicy() domain.Policy {
	return domain.Policy{Classes: map[string]domain.ClassPolicy{"fast": {
		Budget: 3 * time.Second, AttemptTimeout: 300 * time.Millisecond, MaxAttempts: 3,
		Backoff:      domain.Backoff{Initial: 20 * time.Millisecond, Max: 100 * time.Millisecond, Jitter: 10 * time.Millisecond},
		OnExhaustion: domain.ExhaustToManualReview, Priority: 1,
	}}}
}

func testLogger() *slog.Logger {
	if os.Getenv("ENGINE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// running starts e.Run; stop ends it and fails the test if it failed.
func running(t *testing.T, e *Engine) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run = %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func TestDispatch(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{hint.PubSubGoChannel, hint.PubSubPostgres, hint.PubSubNATS} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			if backend == hint.PubSubNATS {
				natsAvailable(t)
			}
			testDispatch(t, backend)
		})
	}
}

func natsAvailable(t *testing.T) {
	t.Helper()
	c, err := net.DialTimeout("tcp", "127.0.0.1:4222", time.Second)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("NATS at 127.0.0.1:4222 is unreachable (CI is set, so this fails): %v", err)
		}
		t.Skipf("NATS at 127.0.0.1:4222 is unreachable, skipping: %v", err)
	}
	c.Close()
}

// Reviews submitted before the engine runs and while it runs, through an
// API-only engine (publishing hints) and the worker itself, are each
// worked once; a hint delivered again changes nothing.
func testDispatch(t *testing.T, backend string) {
	url := dbtest.URL(t)
	ctx := context.Background()
	prov := &instant{}
	topic := fmt.Sprintf("reviewledger_test_%d", time.Now().UnixNano())
	// The fast class with room in its attempts: this test is about hints,
	// and on a loaded machine a write of AttemptStarted has outlasted the
	// fast policy's 300 ms attempt timeout (attempt 1 then closes as
	// store_unavailable and the review takes two).
	roomy := fastPolicy()
	cp := roomy.Classes["fast"]
	cp.Budget, cp.AttemptTimeout = 30*time.Second, 10*time.Second
	roomy.Classes["fast"] = cp
	opts := func(c *Config) {
		c.Policy, c.Calls, c.Logger = roomy, 4, testLogger()
	}
	hints := hint.Config{PubSub: backend, Topic: topic}
	claims := &hintedClaims{}
	watched := func(c *Config) {
		claims.Store = c.Store
		c.Store, c.Ledger = claims, ledger.New(c.Ledger.Store(), ledger.Options{Committer: claims})
	}
	worker, led, closeWorker, err := pgEngineOn(ctx, url, prov, hints, opts, watched)
	if err != nil {
		t.Fatal(err)
	}
	defer closeWorker()
	submitter := worker
	if backend != hint.PubSubGoChannel {
		api, _, closeAPI, err := pgEngineOn(ctx, url, prov, hints, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer closeAPI()
		submitter = api
	}
	const n = 20
	submit := func(i int) {
		id := fmt.Sprintf("%s-%02d", backend, i)
		if _, _, err := submitter.Submit(ctx, SubmitRequest{ReviewID: id, ContentClass: "fast", Content: []byte(id)}); err != nil {
			t.Fatal(err)
		}
	}
	submit(0)
	stop := running(t, worker)
	for i := 1; i < n; i++ {
		submit(i)
	}
	waitNoWork(t, worker, nil)
	claims.reset()
	again := make([]string, 3)
	for i := range again {
		again[i] = fmt.Sprintf("%s-%02d", backend, i)
		if err := submitter.publish(again[i]); err != nil {
			t.Fatal(err)
		}
	}
	clocktest.Eventually(t, "the hints delivered again taken up", func() bool { return claims.asked(again...) })
	waitNoWork(t, worker, nil)
	stop()
	for i := range n {
		id := fmt.Sprintf("%s-%02d", backend, i)
		rv, err := led.Load(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if rv.State() != domain.StateAccepted || rv.Attempts() != 1 {
			t.Errorf("%s: %s after %d attempts", id, rv.State(), rv.Attempts())
		}
	}
	if c := prov.calls.Load(); c != n {
		t.Errorf("%d provider calls for %d reviews", c, n)
	}
}

// hintedClaims is a work store that keeps the review IDs its hinted
// claims asked for (a Claim naming IDs), since the last reset.
type hintedClaims struct {
	work.Store
	mu  sync.Mutex
	ids map[string]bool
}

func (c *hintedClaims) Claim(ctx context.Context, q work.Query) ([]work.Claimed, error) {
	c.mu.Lock()
	for _, id := range q.IDs {
		if c.ids == nil {
			c.ids = map[string]bool{}
		}
		c.ids[id] = true
	}
	c.mu.Unlock()
	return c.Store.Claim(ctx, q)
}

func (c *hintedClaims) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ids = nil
}

// asked reports whether a hinted claim has asked for every one of ids.
func (c *hintedClaims) asked(ids ...string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		if !c.ids[id] {
			return false
		}
	}
	return true
}

// Stopping Run cancels the calls in progress (their attempts closed as
// cancelled), leaves the reviews pending and releases their records, due at
// once: the next engine takes them without waiting for a lease to expire.
func TestRunShutdownAndResume(t *testing.T) {
	t.Parallel()
	url := dbtest.URL(t)
	ctx := context.Background()
	policy := domain.Policy{Classes: map[string]domain.ClassPolicy{"long": {
		Budget: time.Minute, AttemptTimeout: 30 * time.Second, MaxAttempts: 3,
		Backoff:      domain.Backoff{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond},
		OnExhaustion: domain.ExhaustToManualReview, Priority: 1,
	}}}
	opts := func(c *Config) { c.Policy, c.Lease, c.Logger = policy, time.Minute, testLogger() }
	e, led, closeE, err := pgEngine(ctx, url, stuck{}, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer closeE()
	stop := running(t, e)
	ids := []string{"sd-1", "sd-2", "sd-3"}
	for _, id := range ids {
		if _, _, err := e.Submit(ctx, SubmitRequest{ReviewID: id, ContentClass: "long", Content: []byte(id)}); err != nil {
			t.Fatal(err)
		}
	}
	clocktest.Eventually(t, "every review decided", func() bool {
		for _, id := range ids {
			rv, err := led.Load(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if n, _, _, _ := rv.InFlight(); n == 0 {
				return false
			}
		}
		return true
	})
	if got := e.Outstanding(); got != len(ids) {
		t.Errorf("Outstanding = %d with %d reviews stuck at the provider", got, len(ids))
	}
	stop()
	for _, id := range ids {
		want := []string{"Submitted", "AttemptStarted", "AttemptTimedOut:cancelled"}
		if got := eventTypes(t, led, id); !slices.Equal(got, want) {
			t.Errorf("%s after shutdown: %v, want %v", id, got, want)
		}
	}
	// The records are released: the next engine, with a lease of a minute,
	// takes them at once.
	next, _, closeNext, err := pgEngine(ctx, url, &instant{}, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer closeNext()
	if got := next.Outstanding(); got != len(ids) {
		t.Errorf("Outstanding after restart = %d, want the %d reviews left pending", got, len(ids))
	}
	running(t, next)
	waitNoWork(t, next, nil)
	for _, id := range ids {
		want := []string{"Submitted", "AttemptStarted", "AttemptTimedOut:cancelled", "AttemptStarted", "FindingReceived:accepted:response"}
		if got := eventTypes(t, led, id); !slices.Equal(got, want) {
			t.Errorf("%s after resume: %v, want %v", id, got, want)
		}
	}
}

// overlapWatch is a provider that records, per review, whether two calls
// were ever in progress at once.
type overlapWatch struct {
	latency  time.Duration
	mu       sync.Mutex
	inFlight map[string]int
	calls    map[string]int
	overlaps []string
}

func (p *overlapWatch) Call(ctx context.Context, req provider.Request) provider.Result {
	p.mu.Lock()
	p.inFlight[req.ReviewID]++
	p.calls[req.ReviewID]++
	if p.inFlight[req.ReviewID] > 1 {
		p.overlaps = append(p.overlaps, fmt.Sprintf("%s attempt %d", req.ReviewID, req.Attempt))
	}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.inFlight[req.ReviewID]--
		p.mu.Unlock()
	}()
	t := time.NewTimer(p.latency)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return provider.Failure(domain.ClassTransportError, "cancelled")
	}
	return provider.Result{Outcome: provider.OutcomeFinding, Finding: domain.Finding{ReviewID: req.ReviewID, Attempt: req.Attempt, State: domain.DecisionAccepted}}
}

// Two engines share the work, a third starts mid-run and the first is
// stopped: no review is ever called for by two at once, every review ends
// with one finding, attempts numbered without gaps.
func TestEnginesShareWorkWithoutOverlap(t *testing.T) {
	t.Parallel()
	url := dbtest.URL(t)
	ctx := context.Background()
	prov := &overlapWatch{latency: 20 * time.Millisecond, inFlight: map[string]int{}, calls: map[string]int{}}
	policy := domain.Policy{Classes: map[string]domain.ClassPolicy{"shared": {
		Budget: 30 * time.Second, AttemptTimeout: 5 * time.Second, MaxAttempts: 3,
		Backoff:      domain.Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond},
		OnExhaustion: domain.ExhaustToManualReview, Priority: 1,
	}}}
	topic := fmt.Sprintf("reviewledger_test_%d", time.Now().UnixNano())
	opts := func(c *Config) {
		c.Policy, c.Calls, c.Logger = policy, 8, testLogger()
	}
	hints := hint.Config{PubSub: hint.PubSubPostgres, Topic: topic}
	var engines []*Engine
	var stops []func()
	start := func() {
		e, _, closeE, err := pgEngineOn(ctx, url, prov, hints, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(closeE)
		engines = append(engines, e)
		stops = append(stops, running(t, e))
	}
	start()
	start()
	const n = 150
	led := engines[0].ledger
	for i := range n {
		id := "shared-" + strconv.Itoa(i)
		if _, _, err := engines[i%len(engines)].Submit(ctx, SubmitRequest{ReviewID: id, ContentClass: "shared", Content: []byte(id)}); err != nil {
			t.Fatal(err)
		}
		switch i {
		case n / 3:
			start()
		case n / 2:
			stops[0]()
		}
	}
	waitNoWork(t, engines[1], nil)
	prov.mu.Lock()
	overlaps := slices.Clone(prov.overlaps)
	prov.mu.Unlock()
	if len(overlaps) > 0 {
		t.Errorf("calls in progress at once for one review: %v", overlaps)
	}
	for i := range n {
		id := "shared-" + strconv.Itoa(i)
		evs := historyEvents(t, led, id)
		findings, attempt := 0, 0
		for _, e := range evs {
			switch e := e.(type) {
			case domain.FindingReceived:
				findings++
			case domain.AttemptStarted:
				if e.Attempt != attempt+1 {
					t.Errorf("%s: attempt %d after %d", id, e.Attempt, attempt)
				}
				attempt = e.Attempt
			}
		}
		if findings != 1 {
			t.Errorf("%s: %d findings: %v", id, findings, eventTypes(t, led, id))
		}
	}
}

// A review waiting holds no goroutine: thousands of reviews parked for
// their callbacks leave the number of goroutines where it was. On
// synctest's clock, so that the engine is idle, every loop of it started
// and waiting, once every goroutine of the bubble waits (synctest.Wait),
// not after a guess at how long its loops take to start.
func TestParkedReviewsHoldNoGoroutines(t *testing.T) {
	t.Parallel()
	synctest.Test(t, parkedReviewsHoldNoGoroutines)
}

func parkedReviewsHoldNoGoroutines(t *testing.T) {
	mem := memwork.New(memstore.New())
	policy := domain.Policy{Classes: map[string]domain.ClassPolicy{"slow": {
		Budget: 10 * time.Minute, AttemptTimeout: 5 * time.Minute, MaxAttempts: 3,
		Backoff:      domain.Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond},
		OnExhaustion: domain.ExhaustToManualReview, Priority: 1,
	}}}
	e, err := New(inProcess(Config{Policy: policy, Store: mem, Ledger: mem.Ledger(ledger.GroupCommit{}), Provider: acceptsAsync{},
		Logger: testLogger(), Calls: 64}))
	if err != nil {
		t.Fatal(err)
	}
	stop := running(t, e)
	synctest.Wait()
	idle := runtime.NumGoroutine()
	const n = 5000
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				id := "parked-" + strconv.Itoa(i)
				if _, _, err := e.Submit(ctx, SubmitRequest{ReviewID: id, ContentClass: "slow", Content: []byte(id)}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	clocktest.Eventually(t, "the engine idle", func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.parkedCount() == n && e.active == 0
	})
	got := runtime.NumGoroutine()
	t.Logf("%d goroutines idle, %d with %d reviews parked", idle, got, n)
	if got > idle+50 {
		t.Errorf("%d goroutines with %d reviews parked, %d idle", got, n, idle)
	}
	for i := range n {
		if rec, ok := mem.Record("parked-" + strconv.Itoa(i)); !ok || rec.Owner != "" || rec.Awaiting != 1 {
			t.Fatalf("parked-%d: record %+v, %v; want parked awaiting attempt 1", i, rec, ok)
		}
	}
	stop()
}

// acceptsAsync takes every attempt for asynchronous review and never calls
// back.
type acceptsAsync struct{}

func (acceptsAsync) Call(context.Context, provider.Request) provider.Result {
	return provider.Result{Outcome: provider.OutcomeAccepted}
}

// flaky fails a share of the store's calls while on: the database going
// away for a while.
type flaky struct {
	work.Store
	on    atomic.Bool
	count atomic.Int64
}

var errFlaky = errors.New("connection refused (test)")

func (f *flaky) fail() bool {
	if f.on.Load() && f.count.Add(1)%3 != 0 {
		return true
	}
	return false
}

func (f *flaky) Commit(ctx context.Context, a []eventstore.StreamAppend, eff []*work.Change) ([]eventstore.StreamResult, error) {
	if f.fail() {
		return nil, errFlaky
	}
	return f.Store.Commit(ctx, a, eff)
}

func (f *flaky) Claim(ctx context.Context, q work.Query) ([]work.Claimed, error) {
	if f.fail() {
		return nil, errFlaky
	}
	return f.Store.Claim(ctx, q)
}

func (f *flaky) Renew(ctx context.Context, owner string, ids []string, until time.Time) ([]string, []string, error) {
	if f.on.Load() {
		return nil, nil, errFlaky
	}
	return f.Store.Renew(ctx, owner, ids, until)
}

func (f *flaky) Park(ctx context.Context, owner, id string, until time.Time, awaiting int) error {
	if f.fail() {
		return errFlaky
	}
	return f.Store.Park(ctx, owner, id, until, awaiting)
}

func (f *flaky) Payload(ctx context.Context, id string) (work.Payload, error) {
	if f.fail() {
		return work.Payload{}, errFlaky
	}
	return f.Store.Payload(ctx, id)
}

// While the store fails, steps are retried with backoff, never abandoned;
// calls whose lease cannot be renewed in time are stopped and recorded as
// store_unavailable once the store is back. Every review ends accepted.
func TestStoreFaultsAreRetried(t *testing.T) {
	t.Parallel()
	events := memstore.New()
	mem := memwork.New(events)
	store := &flaky{Store: mem}
	prov := &overlapWatch{latency: 600 * time.Millisecond, inFlight: map[string]int{}, calls: map[string]int{}}
	policy := domain.Policy{Classes: map[string]domain.ClassPolicy{"c": {
		Budget: 30 * time.Second, AttemptTimeout: 5 * time.Second, MaxAttempts: 3,
		Backoff:      domain.Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond},
		OnExhaustion: domain.ExhaustToManualReview, Priority: 1,
	}}}
	led := ledger.New(events, ledger.Options{Committer: store})
	e, err := New(inProcess(Config{Policy: policy, Store: store, Ledger: led, Provider: prov, Logger: testLogger(),
		Lease: 500 * time.Millisecond, PollInterval: 20 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	running(t, e)
	ctx := context.Background()
	const n = 20
	for i := range n {
		id := "flaky-" + strconv.Itoa(i)
		if _, _, err := e.Submit(ctx, SubmitRequest{ReviewID: id, ContentClass: "c", Content: []byte(id)}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond) // the calls are under way
	store.on.Store(true)
	time.Sleep(time.Second) // longer than the lease
	store.on.Store(false)
	waitNoWork(t, e, nil)
	lost := 0
	for i := range n {
		id := "flaky-" + strconv.Itoa(i)
		rv, err := led.Load(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if rv.State() != domain.StateAccepted {
			t.Errorf("%s: %s, %v", id, rv.State(), eventTypes(t, led, id))
		}
		// No call starts while the store is out (its lease could not be
		// renewed): the one stopped for its lease, then the one that
		// succeeds.
		if rv.Attempts() > 2 {
			t.Errorf("%s: %d attempts, want at most 2: %v", id, rv.Attempts(), eventTypes(t, led, id))
		}
		if slices.Contains(eventTypes(t, led, id), "AttemptTimedOut:store_unavailable") {
			lost++
		}
	}
	if lost == 0 {
		t.Error("no call was stopped for its lease: the outage was not longer than the lease")
	}
	if testutil.ToFloat64(e.metrics.storeErrors) == 0 {
		t.Error("store errors not counted")
	}
	t.Logf("%d of %d attempts stopped for their lease", lost, n)
}

// settled waits until id has left pending and its record is gone, and
// returns it.
func settled(t *testing.T, led *ledger.Ledger, id string) *ledger.Snapshot {
	t.Helper()
	var rv *ledger.Snapshot
	clocktest.Eventually(t, "the review decided", func() bool {
		var err error
		if rv, err = led.Load(context.Background(), id); err != nil {
			t.Fatal(err)
		}
		return rv.State() != domain.StatePending
	})
	return rv
}

// gated holds every call until its gate opens, and tells when each starts.
type gated struct {
	open    chan struct{}
	started chan string
}

func (p *gated) Call(ctx context.Context, req provider.Request) provider.Result {
	p.started <- req.ReviewID
	select {
	case <-p.open:
	case <-ctx.Done():
		return provider.Failure(domain.ClassCancelled, "stopped")
	}
	return provider.Result{Outcome: provider.OutcomeFinding, Finding: domain.Finding{ReviewID: req.ReviewID, Attempt: req.Attempt, State: domain.DecisionAccepted}}
}

// A review submitted while a call slot is free starts its first attempt in
// the transaction that creates it (Submitted and AttemptStarted share one
// transaction ID), and its submitter is answered the review as submitted;
// one submitted while every slot is busy is created alone and started once
// a slot frees. Both end accepted after one call each.
func TestFirstAttemptStartsWithTheReview(t *testing.T) {
	t.Parallel()
	url := dbtest.URL(t)
	ctx := context.Background()
	prov := &gated{open: make(chan struct{}), started: make(chan string, 4)}
	// The gate holds first-1's call while the test looks on: its attempt
	// must not time out meanwhile, however slow the machine.
	patient := domain.Policy{Classes: map[string]domain.ClassPolicy{"fast": {
		Budget: time.Minute, AttemptTimeout: 30 * time.Second, MaxAttempts: 3,
		Backoff: domain.Backoff{Initial: 20 * time.Millisecond, Max: 100 * time.Millisecond}, OnExhaustion: domain.ExhaustToManualReview,
	}}}
	e, led, closeEngine, err := pgEngine(ctx, url, prov, func(c *Config) { c.Policy, c.Calls = patient, 1 })
	if err != nil {
		t.Fatal(err)
	}
	defer closeEngine()
	stop := running(t, e)
	defer stop()
	clocktest.Eventually(t, "the engine running", e.running.Load)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	transactions := func(id string) int {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(DISTINCT xid) FROM event WHERE stream = $1 AND revision <= 1`, domain.StreamName(id)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	snap, created, err := e.Submit(ctx, SubmitRequest{ReviewID: "first-1", ContentClass: "fast", Content: []byte("one")})
	if err != nil || !created {
		t.Fatalf("Submit(first-1) = %v, created %v", err, created)
	}
	if snap.Version() != 0 || snap.Attempts() != 0 || snap.State() != domain.StatePending {
		t.Errorf("first-1 answered at version %d with %d attempts (%s), want the review as submitted", snap.Version(), snap.Attempts(), snap.State())
	}
	if got := <-prov.started; got != "first-1" {
		t.Fatalf("the provider was called for %s first", got)
	}
	if n := transactions("first-1"); n != 1 {
		t.Errorf("first-1: Submitted and AttemptStarted in %d transactions, want 1", n)
	}

	if _, _, err := e.Submit(ctx, SubmitRequest{ReviewID: "first-2", ContentClass: "fast", Content: []byte("two")}); err != nil {
		t.Fatal(err)
	}
	close(prov.open)
	if got := <-prov.started; got != "first-2" {
		t.Fatalf("the provider was called for %s, want first-2", got)
	}
	waitNoWork(t, e, nil)
	if n := transactions("first-2"); n != 2 {
		t.Errorf("first-2, submitted with no slot free: Submitted and AttemptStarted in %d transactions, want 2", n)
	}
	for _, id := range []string{"first-1", "first-2"} {
		rv, err := led.Load(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if rv.State() != domain.StateAccepted || rv.Attempts() != 1 {
			t.Errorf("%s: %s after %d attempts, want accepted after 1", id, rv.State(), rv.Attempts())
		}
	}
}
