package runner

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/reviewledger/reviewledger/api/provider"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
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
// only one waiting), AfterFunc timers fire when it passes them.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
	sleeps []time.Duration
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
	c.mu.Lock()
	c.sleeps = append(c.sleeps, d)
	c.mu.Unlock()
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
	for _, tm := range c.timers {
		if !tm.done && !tm.at.After(c.now) {
			tm.done = true
			due = append(due, tm)
		}
	}
	c.mu.Unlock()
	sort.Slice(due, func(i, j int) bool { return due[i].at.Before(due[j].at) })
	for _, tm := range due {
		tm.f()
	}
}

func (c *fakeClock) Sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}

// step is one scripted provider answer.
type step struct {
	latency time.Duration
	hang    bool // wait for the attempt's context after the latency
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

// toTimeout as a latency advances the clock to the attempt's timeout.
const toTimeout = time.Duration(-1)

var hang = step{latency: toTimeout, hang: true}

// scripted answers attempts in order; the last step repeats.
type scripted struct {
	clock *fakeClock
	mu    sync.Mutex
	steps []step
	reqs  []provider.Request
}

func (p *scripted) Review(ctx context.Context, req provider.Request) provider.Result {
	p.mu.Lock()
	p.reqs = append(p.reqs, req)
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

func (p *scripted) Requests() []provider.Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]provider.Request(nil), p.reqs...)
}

var testSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("runner test secret, 32 bytes long"))

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

type harness struct {
	*Service
	clock  *fakeClock
	prov   *scripted
	ledger *ledger.Ledger
	logs   *syncBuffer
	reg    *prometheus.Registry
	signer *provider.Signer
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

func newHarness(t *testing.T, steps []step, tweak ...func(*Config)) *harness {
	t.Helper()
	pool := dbtest.Pool(t)
	store := pgstore.New(pool, pgstore.Config{})
	t.Cleanup(store.Close)
	clock := newFakeClock()
	h := &harness{clock: clock, prov: &scripted{clock: clock, steps: steps}, ledger: ledger.New(store),
		logs: &syncBuffer{}, reg: prometheus.NewRegistry()}
	h.signer, _ = provider.NewSigner(testSecret)
	cfg := Config{
		Policy: testPolicy(), Ledger: h.ledger, Pool: pool, Provider: h.prov, Signer: h.signer,
		Logger: slog.New(slog.NewJSONHandler(h.logs, nil)), Metrics: h.reg,
		Clock: clock, Rand: rand.New(rand.NewPCG(1, 2)),
	}
	for _, f := range tweak {
		f(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.closePub() })
	h.Service = s
	return h
}

func (h *harness) submit(t *testing.T, id, class string) *ledger.Review {
	t.Helper()
	rv, created, err := h.Submit(context.Background(), SubmitRequest{ReviewID: id, ContentClass: class, ContentType: "text/plain", Content: []byte("content of " + id), Actor: ledger.Actor{Name: "tester"}})
	if err != nil || !created {
		t.Fatalf("Submit(%s) = %v, created %v", id, err, created)
	}
	return rv
}

// run submits a review and works it to the end.
func (h *harness) run(t *testing.T, id, class string) *ledger.Review {
	t.Helper()
	h.submit(t, id, class)
	if err := h.Review(context.Background(), id); err != nil {
		t.Fatalf("Review(%s) = %v", id, err)
	}
	return h.load(t, id)
}

func (h *harness) load(t *testing.T, id string) *ledger.Review {
	t.Helper()
	rv, err := h.ledger.Load(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return rv
}

func (h *harness) events(t *testing.T, id string) []domain.Event {
	t.Helper()
	hist, err := h.ledger.History(context.Background(), id)
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
	var out []string
	for _, e := range h.events(t, id) {
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

// signedCallback returns headers and body of a callback signed now.
func (h *harness) signedCallback(id string, attempt int, state, webhookID string) (http.Header, []byte) {
	body := []byte(`{"review_id":"` + id + `","attempt":` + itoa(attempt) + `,"state":"` + state + `","reasons":["r"]}`)
	hdr := http.Header{}
	h.signer.SignHeader(hdr, webhookID, h.clock.Now(), body)
	return hdr, body
}

func itoa(n int) string {
	b := []byte{}
	if n == 0 {
		return "0"
	}
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}
