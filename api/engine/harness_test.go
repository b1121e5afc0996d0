package engine

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/reviewledger/reviewledger/api/engine/hint"
	"github.com/reviewledger/reviewledger/api/engine/provider"
	"github.com/reviewledger/reviewledger/api/engine/work"
	"github.com/reviewledger/reviewledger/api/engine/work/memwork"
	"github.com/reviewledger/reviewledger/api/engine/work/pgwork"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/memstore"
	"github.com/reviewledger/reviewledger/eventstore/pgstore"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

func TestMain(m *testing.M) {
	if os.Getenv(crashChildEnv) != "" {
		os.Exit(crashChild())
	}
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreAnyFunction("github.com/nats-io/nats.go.(*Conn).doReconnect"),
	)
}

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// fakeClock is a clock driven by hand. Sleep advances it (the sleeper is the
// only one waiting); AfterFunc timers fire when it passes them.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	at   time.Time
	f    func()
	done bool
}

func newFakeClock() *fakeClock { return &fakeClock{now: t0} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.Advance(d)
	return ctx.Err()
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	tm := &fakeTimer{at: c.now.Add(d), f: f}
	c.timers = append(c.timers, tm)
	c.mu.Unlock()
	if d <= 0 {
		c.Advance(0)
	}
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		was := !tm.done
		tm.done = true
		return was
	}
}

// Advance moves the clock and runs the timers that came due, in order.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*fakeTimer
	live := c.timers[:0]
	for _, tm := range c.timers {
		switch {
		case tm.done:
		case !tm.at.After(c.now):
			tm.done = true
			due = append(due, tm)
		default:
			live = append(live, tm)
		}
	}
	c.timers = live
	c.mu.Unlock()
	sort.Slice(due, func(i, j int) bool { return due[i].at.Before(due[j].at) })
	for _, tm := range due {
		tm.f()
	}
}

// step is one scripted provider answer.
type step struct {
	latency time.Duration
	hang    bool // wait for the call's context after the latency
	result  provider.Result
	// then runs after the latency, before answering (e.g. a callback).
	then func(req provider.Request)
	// advance moves the clock after then, before answering (toTimeout:
	// to the attempt's timeout).
	advance time.Duration
}

func finding(id string, state domain.Decision, reasons ...string) step {
	return step{latency: 50 * time.Millisecond, result: provider.Result{Outcome: provider.OutcomeFinding,
		Finding: domain.Finding{ReviewID: id, State: state, Reasons: reasons}}}
}

func failure(c domain.Classification, retryAfter time.Duration) step {
	r := provider.Failure(c, "scripted")
	r.RetryAfter = retryAfter
	return step{latency: 20 * time.Millisecond, result: r}
}

var async = step{latency: 10 * time.Millisecond, result: provider.Result{Outcome: provider.OutcomeAccepted}}

// toTimeout as a latency advances the clock to the attempt's timeout.
const toTimeout = time.Duration(-1)

var hang = step{latency: toTimeout, hang: true}

// scripted answers attempts in order; the last step repeats.
type scripted struct {
	clock *fakeClock
	mu    sync.Mutex
	steps []step
	reqs  []provider.Request
	// parents are the traceparents the calls' contexts carried, in order.
	parents []string
}

func (p *scripted) Call(ctx context.Context, req provider.Request) provider.Result {
	p.mu.Lock()
	p.reqs = append(p.reqs, req)
	p.parents = append(p.parents, TraceParent(ctx))
	st := p.steps[min(len(p.reqs), len(p.steps))-1]
	p.mu.Unlock()
	if st.latency == toTimeout {
		st.latency = req.Timeout
	}
	p.clock.Advance(st.latency)
	if st.then != nil {
		st.then(req)
	}
	if st.advance == toTimeout {
		st.advance = req.Timeout - st.latency
	}
	p.clock.Advance(st.advance)
	if st.hang {
		<-ctx.Done()
		return provider.Failure(domain.ClassTransportError, "cancelled")
	}
	r := st.result
	if r.Outcome == provider.OutcomeFinding && r.Finding.Attempt == 0 {
		r.Finding.Attempt = req.Attempt
	}
	return r
}

func (p *scripted) Parents() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.parents)
}

func (p *scripted) Requests() []provider.Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]provider.Request(nil), p.reqs...)
}

var testSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("engine test secret, 32 bytes long"))

func testPolicy() domain.Policy {
	backoff := domain.Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Jitter: 50 * time.Millisecond}
	base := domain.ClassPolicy{Budget: 10 * time.Second, AttemptTimeout: 2 * time.Second, MaxAttempts: 3,
		Backoff: backoff, OnExhaustion: domain.ExhaustToManualReview, Priority: 1}
	closed := base
	closed.OnExhaustion = domain.ExhaustToRejected
	gated := base
	gated.HumanGate = true
	short := base
	short.Budget = 3 * time.Second
	return domain.Policy{Classes: map[string]domain.ClassPolicy{"c": base, "closed": closed, "gated": gated, "short": short}}
}

// harness is an engine on a fake clock, with its storage in memory, driven
// by hand: nothing runs until a test works a review (drive, workOnce).
type harness struct {
	*Engine
	clock  *fakeClock
	prov   *scripted
	ledger *ledger.Ledger
	mem    recordReader
	pool   *pgxpool.Pool // on PostgreSQL (newPGHarness)
	logs   *syncBuffer
	reg    *prometheus.Registry
	signer *provider.Signer
	// waits are the waits drive sat out: from when a review parked to
	// when it was due.
	waits []time.Duration
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// recordReader reads a review's work record, for tests.
type recordReader interface {
	Record(reviewID string) (work.Record, bool)
}

func newHarness(t *testing.T, steps []step, tweak ...func(*Config)) *harness {
	t.Helper()
	mem := memwork.New(memstore.New())
	return newHarnessOn(t, mem, mem, mem.Ledger(ledger.GroupCommit{}), steps, tweak...)
}

// newPGHarness is newHarness on PostgreSQL: pgstore, pgwork, a database of
// its own.
func newPGHarness(t *testing.T, steps []step, tweak ...func(*Config)) *harness {
	t.Helper()
	pool := dbtest.Pool(t)
	events := pgstore.New(pool, pgstore.Config{})
	t.Cleanup(events.Close)
	store := pgwork.New(pool, events)
	h := newHarnessOn(t, store, pgRecords{pool}, store.Ledger(ledger.GroupCommit{}), steps, tweak...)
	h.pool = pool
	return h
}

// pgRecords reads review_work.
type pgRecords struct{ pool *pgxpool.Pool }

func (p pgRecords) Record(id string) (work.Record, bool) {
	var (
		r     = work.Record{ReviewID: id}
		owner *string
		lease *time.Time
	)
	err := p.pool.QueryRow(context.Background(), `SELECT deadline, due_at, owner_id, lease_until, awaiting FROM review_work WHERE review_id = $1`, id).
		Scan(&r.Deadline, &r.DueAt, &owner, &lease, &r.Awaiting)
	if err != nil {
		return work.Record{}, false
	}
	if owner != nil {
		r.Owner, r.LeaseUntil = *owner, *lease
	}
	return r, true
}

// inProcess gives cfg the in-process hints (the Go channel) unless it has
// some.
func inProcess(cfg Config) Config {
	if cfg.Hints == nil {
		cfg.Hints = hint.NewGoChannel(cfg.Logger)
	}
	return cfg
}

func newHarnessOn(t *testing.T, store work.Store, records recordReader, led *ledger.Ledger, steps []step, tweak ...func(*Config)) *harness {
	t.Helper()
	clock := newFakeClock()
	h := &harness{clock: clock, prov: &scripted{clock: clock, steps: steps}, mem: records, ledger: led,
		logs: &syncBuffer{}, reg: prometheus.NewRegistry()}
	h.signer, _ = provider.NewSigner(testSecret)
	cfg := Config{
		Policy: testPolicy(), Store: store, Ledger: h.ledger, Provider: h.prov, Signer: h.signer,
		Logger: slog.New(slog.NewJSONHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})), Metrics: h.reg,
		Clock: clock, Owner: "test-owner",
	}
	for _, f := range tweak {
		f(&cfg)
	}
	e, err := New(inProcess(cfg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.closePub() })
	h.Engine = e
	return h
}

func (h *harness) submit(t *testing.T, id, class string) *ledger.Snapshot {
	t.Helper()
	rv, created, err := h.Submit(context.Background(), SubmitRequest{ReviewID: id, ContentClass: class, ContentType: "text/plain", Content: []byte("content of " + id), Actor: ledger.Actor{Name: "tester"}})
	if err != nil || !created {
		t.Fatalf("Submit(%s) = %v, created %v", id, err, created)
	}
	return rv
}

// run submits a review and drives it to the end.
func (h *harness) run(t *testing.T, id, class string) *ledger.Snapshot {
	t.Helper()
	h.submit(t, id, class)
	return h.drive(t, id)
}

// drive works id until it leaves the automated path: it takes the review
// whenever its record is due, moving the clock to the due time when the
// review waits. It stops when the review has no record left.
func (h *harness) drive(t *testing.T, id string) *ledger.Snapshot {
	t.Helper()
	for range 100 {
		rec, ok := h.mem.Record(id)
		if !ok {
			return h.load(t, id)
		}
		now := h.clock.Now()
		if rec.Owner != "" && !rec.LeaseUntil.Before(now) {
			t.Fatalf("%s is held by %s until %s at %s", id, rec.Owner, rec.LeaseUntil, now)
		}
		if rec.DueAt.After(now) {
			h.waits = append(h.waits, rec.DueAt.Sub(now))
			h.clock.Advance(rec.DueAt.Sub(now))
		}
		h.workOnce(t, id)
	}
	t.Fatalf("%s still on the automated path after 100 steps", id)
	return nil
}

// workOnce takes id's record if it is due and works the review until it
// parks or leaves the automated path; it reports whether it took it.
func (h *harness) workOnce(t *testing.T, id string) bool {
	t.Helper()
	return h.workOnceAs(t, id, false)
}

func (h *harness) workOnceAs(t *testing.T, id string, sweep bool) bool {
	t.Helper()
	now := h.clock.Now()
	claimed, err := h.store.Claim(context.Background(), work.Query{Owner: h.cfg.Owner, LeaseUntil: now.Add(h.cfg.Lease), Now: now, IDs: []string{id}})
	if err != nil {
		t.Fatal(err)
	}
	if len(claimed) == 0 {
		return false
	}
	done := make(chan struct{})
	h.takeOne(claimed[0], now, sweep, func() { close(done) })
	<-done
	return true
}

func (h *harness) load(t *testing.T, id string) *ledger.Snapshot {
	t.Helper()
	rv, err := h.ledger.Load(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return rv
}

func (h *harness) events(t *testing.T, id string) []domain.Event {
	t.Helper()
	return historyEvents(t, h.ledger, id)
}

func historyEvents(t *testing.T, l *ledger.Ledger, id string) []domain.Event {
	t.Helper()
	hist, err := l.History(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]domain.Event, len(hist.Events))
	for i, e := range hist.Events {
		out[i] = e.Event
	}
	return out
}

func (h *harness) types(t *testing.T, id string) []string {
	t.Helper()
	return eventTypes(t, h.ledger, id)
}

// eventTypes lists a review's events as Type[:detail], the detail being a
// timeout's classification, an escalation's reason or a finding's state and
// source.
func eventTypes(t *testing.T, l *ledger.Ledger, id string) []string {
	t.Helper()
	var out []string
	for _, e := range historyEvents(t, l, id) {
		typ := e.EventType()
		switch e := e.(type) {
		case domain.AttemptTimedOut:
			typ += ":" + string(e.Classification)
		case domain.Escalated:
			typ += ":" + string(e.Reason)
		case domain.FindingReceived:
			typ += ":" + string(e.State) + ":" + e.Source
		}
		out = append(out, typ)
	}
	return out
}

func (h *harness) counter(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	return testutil.ToFloat64(c)
}

// conflicts returns the conflicting completions recorded for a review, as
// "source:reason:attempt".
func (h *harness) conflicts(t *testing.T, id string) []string {
	t.Helper()
	log, err := h.ledger.Conflicts(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if err := log.Verify(); err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(log.Events))
	for i, e := range log.Events {
		c := e.Event.(domain.ConflictingCompletionRecorded)
		out[i] = fmt.Sprintf("%s:%s:%d", c.Source, c.Reason, c.Attempt)
	}
	return out
}

// signedCallback returns headers and body of a callback signed now, its
// finding's reasons ["r"].
func (h *harness) signedCallback(id string, attempt int, state, webhookID string) (http.Header, []byte) {
	return h.signedFinding(id, attempt, state, []string{"r"}, webhookID)
}

// signedFinding returns headers and body of a callback with that finding,
// signed now.
func (h *harness) signedFinding(id string, attempt int, state string, reasons []string, webhookID string) (http.Header, []byte) {
	body, err := json.Marshal(provider.CallbackBody{ReviewID: id, Attempt: attempt, State: state, Reasons: reasons})
	if err != nil {
		panic(err)
	}
	hdr := http.Header{}
	h.signer.SignHeader(hdr, webhookID, h.clock.Now(), body)
	return hdr, body
}
