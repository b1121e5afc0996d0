package notify

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/memstore"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// testSecret signs the webhooks of the tests.
var testSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("notify-test-key-0123456789abcdef"))

// received is one request the test receiver accepted as signed.
type received struct {
	id   string
	body Body
	raw  []byte
}

// receiver is the test's webhook endpoint: it verifies every request with
// the Standard Webhooks reference library, records it, and answers what
// answer says (200 when nil).
type receiver struct {
	t   *testing.T
	srv *httptest.Server
	wh  *standardwebhooks.Webhook

	mu       sync.Mutex
	answer   func(r received, n int) (status int, header http.Header)
	got      []received
	invalid  int
	inFlight int
	maxIn    int
}

func newReceiver(t *testing.T) *receiver {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	rc := &receiver{t: t, wh: wh}
	rc.srv = httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	if err := rc.wh.Verify(raw, r.Header); err != nil {
		rc.mu.Lock()
		rc.invalid++
		rc.mu.Unlock()
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	var b Body
	if err := json.Unmarshal(raw, &b); err != nil || r.Header.Get("Content-Type") != "application/json" {
		http.Error(w, "not a webhook body", http.StatusBadRequest)
		return
	}
	rec := received{id: r.Header.Get("webhook-id"), body: b, raw: raw}
	rc.mu.Lock()
	rc.got = append(rc.got, rec)
	n := len(rc.got)
	answer := rc.answer
	rc.inFlight++
	rc.maxIn = max(rc.maxIn, rc.inFlight)
	rc.mu.Unlock()
	defer func() {
		rc.mu.Lock()
		rc.inFlight--
		rc.mu.Unlock()
	}()
	status := http.StatusOK
	if answer != nil {
		var h http.Header
		status, h = answer(rec, n)
		for k, v := range h {
			w.Header()[k] = v
		}
	}
	w.WriteHeader(status)
	_, _ = io.WriteString(w, http.StatusText(status))
}

func (rc *receiver) setAnswer(f func(r received, n int) (int, http.Header)) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.answer = f
}

func (rc *receiver) all() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.invalid > 0 {
		rc.t.Errorf("%d requests failed the reference library's verification", rc.invalid)
	}
	return slices.Clone(rc.got)
}

// distinct returns the first request of every webhook-id, in arrival order.
func (rc *receiver) distinct() []received {
	seen := map[string]bool{}
	var out []received
	for _, r := range rc.all() {
		if !seen[r.id] {
			seen[r.id] = true
			out = append(out, r)
		}
	}
	return out
}

// harness is a ledger on a memory store with the notifier's tables in a
// database of their own.
type harness struct {
	t     *testing.T
	pool  *pgxpool.Pool
	store *memstore.Store
	led   *ledger.Ledger
	recv  *receiver
	now   time.Time
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	store := memstore.New()
	return &harness{t: t, pool: dbtest.Pool(t), store: store, led: ledger.New(store), recv: newReceiver(t), now: time.Now().UTC()}
}

// config is a notifier's configuration for the harness: fast retries.
func (h *harness) config() Config {
	return Config{
		URL: h.recv.srv.URL + "/hooks", Secret: testSecret, From: FromStart,
		Pool: h.pool, Store: h.store, Histories: h.led,
		Timeout: 2 * time.Second, BackoffInitial: 20 * time.Millisecond, BackoffMax: 100 * time.Millisecond,
		PollInterval: 50 * time.Millisecond, StatsInterval: 50 * time.Millisecond, RetryDelay: 50 * time.Millisecond,
		Registerer: prometheus.NewRegistry(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// start runs a notifier until the test ends or stop is called.
func (h *harness) start(cfg Config) (n *Notifier, stop func()) {
	h.t.Helper()
	n, err := New(cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := n.Run(ctx); err != nil {
			h.t.Errorf("Run: %v", err)
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	h.t.Cleanup(stop)
	return n, stop
}

func (h *harness) load(id string) *ledger.Snapshot {
	h.t.Helper()
	rv, err := h.led.Load(context.Background(), id)
	if err != nil {
		h.t.Fatal(err)
	}
	return rv
}

func (h *harness) append(rv *ledger.Snapshot, events ...domain.Event) *ledger.Snapshot {
	h.t.Helper()
	next, err := h.led.Append(context.Background(), rv, ledger.Actor{Name: "test"}, events...)
	if err != nil {
		h.t.Fatal(err)
	}
	return next
}

// submit opens a review of class and starts its first attempt.
func (h *harness) submit(id, class string) *ledger.Snapshot {
	h.t.Helper()
	cp, err := testPolicy().Class(class)
	if err != nil {
		h.t.Fatal(err)
	}
	e, err := domain.Submit(domain.SubmitCommand{ReviewID: id, ContentClass: class, ContentType: "text/plain",
		PayloadDigest: "sha256:00", PayloadBytes: 1, Policy: cp, Now: h.now})
	if err != nil {
		h.t.Fatal(err)
	}
	rv, err := h.led.Create(context.Background(), e, ledger.Actor{Name: "test"})
	if err != nil {
		h.t.Fatal(err)
	}
	start, err := rv.StartAttempt(h.now)
	if err != nil {
		h.t.Fatal(err)
	}
	return h.append(rv, start)
}

// find records the attempt in flight's finding.
func (h *harness) find(id string, state domain.Decision) *ledger.Snapshot {
	h.t.Helper()
	rv := h.load(id)
	attempt, _, _, _ := rv.InFlight()
	evs, err := rv.RecordFinding(domain.Finding{ReviewID: id, Attempt: attempt, State: state, Reasons: []string{"test"}}, domain.SourceResponse, h.now)
	if err != nil {
		h.t.Fatal(err)
	}
	return h.append(rv, evs...)
}

// decide records a moderator's decision.
func (h *harness) decide(id, moderator string, state domain.Decision) *ledger.Snapshot {
	h.t.Helper()
	rv := h.load(id)
	evs, err := rv.DecideManually(domain.ManualDecision{Moderator: moderator, State: state, ExpectedVersion: rv.Version()}, h.now)
	if err != nil {
		h.t.Fatal(err)
	}
	return h.append(rv, evs...)
}

func testPolicy() domain.Policy {
	p := domain.DefaultPolicy()
	rule := p.Classes["publishing_rule"] // human gate, fails closed
	gate := rule
	gate.Approvals = 2
	p.Classes["four_eyes"] = gate
	return p
}

// deliveries lists every delivery.
func (h *harness) deliveries(q Query) []Delivery {
	h.t.Helper()
	q.Limit = MaxLimit
	ds, err := NewDB(h.pool).List(context.Background(), q)
	if err != nil {
		h.t.Fatal(err)
	}
	return ds
}
