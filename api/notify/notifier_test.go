package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/reviewledger/reviewledger/api/view"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
)

// expected is a webhook the ledger's history calls for.
type expected struct {
	typ     string
	version uint64
	state   string
}

func (h *harness) expect(t *testing.T, want map[string][]expected) {
	t.Helper()
	n := 0
	for _, w := range want {
		n += len(w)
	}
	clocktest.Eventually(t, fmt.Sprintf("%d webhooks", n), func() bool { return len(h.recv.distinct()) >= n })
	got := map[string][]expected{}
	for _, r := range h.recv.distinct() {
		got[r.body.Data.ReviewID] = append(got[r.body.Data.ReviewID], expected{r.body.Type, r.body.Data.Version, r.body.Data.State})
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("webhooks received:\n%v\nwant:\n%v", got, want)
	}
}

// TestWebhooksOfEveryPath: an automated decision, a fail-closed
// escalation, a human gate followed by a moderator, and a four-eyes class
// whose first approval sends nothing: each change into manual_review or a
// final state is sent once, signed (the reference library verifies
// every request), with the review view as it stood right after the event,
// whose ledger ID is the webhook-id.
func TestWebhooksOfEveryPath(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.start(h.config())
	h.submit("auto", "caption_suggestion")
	h.find("auto", domain.DecisionRejected)
	h.submit("closed", "publishing_rule")
	rv := h.load("closed")
	esc, err := rv.Escalate(domain.ReasonAttemptsExhausted, "", h.now)
	if err != nil {
		t.Fatal(err)
	}
	h.append(rv, esc)
	h.submit("gate", "publishing_rule")
	h.find("gate", domain.DecisionAccepted)
	h.decide("gate", "mona", domain.DecisionAccepted)
	h.submit("four", "four_eyes")
	h.find("four", domain.DecisionAccepted)
	h.decide("four", "mona", domain.DecisionRejected)
	h.decide("four", "max", domain.DecisionRejected)

	h.expect(t, map[string][]expected{
		"auto":   {{EventDecided, 2, "rejected"}},
		"closed": {{EventDecided, 2, "rejected"}},
		"gate":   {{EventManualReview, 3, "manual_review"}, {EventDecided, 4, "accepted"}},
		"four":   {{EventManualReview, 3, "manual_review"}, {EventDecided, 5, "rejected"}},
	})
	// Each body is the view of the review at its version; the webhook-id
	// is the ID of the event that made it.
	ids := map[string]string{}
	all, err := h.store.ReadAll(context.Background(), eventstore.Start, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range all {
		ids[fmt.Sprintf("%s@%d", e.Stream, e.Revision)] = e.ID
	}
	for _, r := range h.recv.distinct() {
		id := r.body.Data.ReviewID
		hist, err := h.led.History(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		rv := &domain.Review{}
		for _, e := range hist.Events[:r.body.Data.Version+1] {
			if err := rv.Apply(e.Revision, e.Event); err != nil {
				t.Fatal(err)
			}
		}
		want, _ := json.Marshal(view.NewReview(rv))
		got, _ := json.Marshal(r.body.Data)
		if string(got) != string(want) {
			t.Errorf("%s v%d: data %s, want %s", id, r.body.Data.Version, got, want)
		}
		if wantID := ids[fmt.Sprintf("review-%s@%d", id, r.body.Data.Version)]; r.id != wantID {
			t.Errorf("%s v%d: webhook-id %q, want the event's ID %q", id, r.body.Data.Version, r.id, wantID)
		}
		if r.body.Timestamp.IsZero() || strings.Contains(string(r.raw), "content\"") {
			t.Errorf("body %s", r.raw)
		}
		// Only a provider's deciding finding names a provider: the
		// moderator's and the policy's decisions do not.
		wantProvider := ""
		if id == "auto" {
			wantProvider = domain.DefaultProvider
		}
		if r.body.Data.DecidedByProvider != wantProvider {
			t.Errorf("%s v%d: decided_by_provider %q, want %q", id, r.body.Data.Version, r.body.Data.DecidedByProvider, wantProvider)
		}
	}
	if n := len(h.recv.all()); n != 6 {
		t.Errorf("%d requests for 6 webhooks", n)
	}
	clocktest.Eventually(t, "6 deliveries recorded as delivered", func() bool { return len(h.deliveries(Query{State: StateDelivered})) == 6 })
}

// TestRetriesKeepOrderAndSpareOthers: the receiver fails review a's first
// webhook three times, the first time with Retry-After: 1. Its second
// webhook waits until the first was delivered, while review b's go out
// meanwhile; the wait after the Retry-After answer is at least a second.
func TestRetriesKeepOrderAndSpareOthers(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var mu sync.Mutex
	failures := 0
	h.recv.setAnswer(func(r received, _ int) (int, http.Header) {
		mu.Lock()
		defer mu.Unlock()
		if r.body.Data.ReviewID == "a" && r.body.Data.Version == 3 && failures < 3 {
			failures++
			if failures == 1 {
				return http.StatusServiceUnavailable, http.Header{"Retry-After": {"1"}}
			}
			return http.StatusInternalServerError, nil
		}
		return http.StatusOK, nil
	})
	h.start(h.config())
	h.submit("a", "publishing_rule")
	h.find("a", domain.DecisionAccepted)
	h.decide("a", "mona", domain.DecisionRejected)
	clocktest.Eventually(t, "the first failure", func() bool {
		ds := h.deliveries(Query{State: StateFailing, ReviewID: "a"})
		return len(ds) == 1 && ds[0].Attempts == 1
	})
	d := h.deliveries(Query{State: StateFailing, ReviewID: "a"})[0]
	if d.State != StateRetrying || d.LastStatus == nil || *d.LastStatus != 503 || d.LastError == nil || !strings.HasPrefix(*d.LastError, "HTTP 503") {
		t.Errorf("failing delivery %+v", d)
	}
	if wait := d.NextAttemptAt.Sub(*d.LastAttemptAt); wait < time.Second {
		t.Errorf("next attempt %s after a Retry-After of 1s", wait)
	}
	h.submit("b", "caption_suggestion")
	h.find("b", domain.DecisionAccepted)
	h.expect(t, map[string][]expected{
		"a": {{EventManualReview, 3, "manual_review"}, {EventDecided, 4, "rejected"}},
		"b": {{EventDecided, 2, "accepted"}},
	})
	var order []string
	for _, r := range h.recv.all() {
		order = append(order, fmt.Sprintf("%s%d", r.body.Data.ReviewID, r.body.Data.Version))
	}
	if want := "a3 b2 a3 a3 a3 a4"; strings.Join(order, " ") != want {
		t.Errorf("requests %v, want %s", order, want)
	}
}

// TestGivesUpAndRedelivers: a delivery failing past its retry window is
// given up, listed as failing with its last error, and holds back its
// review's later webhook; redelivered once the receiver is mended, both go
// out in order, with the same webhook-id as before.
func TestGivesUpAndRedelivers(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var broken sync.Map
	broken.Store("on", true)
	h.recv.setAnswer(func(received, int) (int, http.Header) {
		if _, ok := broken.Load("on"); ok {
			return http.StatusBadGateway, nil
		}
		return http.StatusNoContent, nil
	})
	cfg := h.config()
	cfg.RetryFor = 300 * time.Millisecond
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	n, _ := h.start(cfg)
	h.submit("g", "publishing_rule")
	h.find("g", domain.DecisionAccepted)
	h.decide("g", "mona", domain.DecisionAccepted)
	clocktest.Eventually(t, "the delivery to be given up", func() bool { return len(h.deliveries(Query{State: StateFailed})) == 1 })
	failed := h.deliveries(Query{State: StateFailed})[0]
	if failed.Version != 3 || failed.LastError == nil || *failed.LastError != "HTTP 502: Bad Gateway" || failed.NextAttemptAt != nil {
		t.Errorf("given up: %+v", failed)
	}
	if got := h.deliveries(Query{State: StateFailing}); len(got) != 1 || got[0].ID != failed.ID {
		t.Errorf("failing: %+v", got)
	}
	later := h.deliveries(Query{State: StatePending})
	if len(later) != 1 || later[0].Version != 4 || later[0].Attempts != 0 {
		t.Errorf("the later webhook is not held back: %+v", later)
	}
	clocktest.Eventually(t, "the gauges", func() bool {
		return testutil.ToFloat64(n.metrics.failed) == 1 && testutil.ToFloat64(n.metrics.pending) == 1 && testutil.ToFloat64(n.metrics.oldest) > 0
	})
	if got := testutil.ToFloat64(n.metrics.attempts.WithLabelValues(outcomeGivenUp)); got != 1 {
		t.Errorf("given_up attempts %v", got)
	}

	broken.Delete("on")
	if _, err := NewDB(h.pool).Redeliver(context.Background(), "nope", h.now); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("Redeliver of an unknown delivery: %v", err)
	}
	d, err := NewDB(h.pool).Redeliver(context.Background(), failed.ID, time.Now())
	if err != nil || d.State != StateRetrying {
		t.Fatalf("Redeliver: %+v, %v", d, err)
	}
	clocktest.Eventually(t, "both delivered", func() bool { return len(h.deliveries(Query{State: StateDelivered})) == 2 })
	all := h.recv.all()
	last := all[len(all)-2:]
	if last[0].id != failed.ID || last[0].body.Data.Version != 3 || last[1].body.Data.Version != 4 {
		t.Errorf("after the redelivery: %s v%d, %s v%d", last[0].id, last[0].body.Data.Version, last[1].id, last[1].body.Data.Version)
	}
	clocktest.Eventually(t, "the gauges to empty", func() bool {
		return testutil.ToFloat64(n.metrics.failed) == 0 && testutil.ToFloat64(n.metrics.pending) == 0 && testutil.ToFloat64(n.metrics.oldest) == 0
	})
}

// TestRestartResumesFromTheCheckpoint: a notifier stopped and started
// again neither loses the decisions made meanwhile nor makes the earlier
// deliveries again.
func TestRestartResumesFromTheCheckpoint(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	_, stop := h.start(h.config())
	h.submit("r1", "caption_suggestion")
	h.find("r1", domain.DecisionAccepted)
	h.expect(t, map[string][]expected{"r1": {{EventDecided, 2, "accepted"}}})
	clocktest.Eventually(t, "the delivery to be recorded", func() bool { return len(h.deliveries(Query{State: StateDelivered})) == 1 })
	stop()
	h.submit("r2", "caption_suggestion")
	h.find("r2", domain.DecisionRejected)
	h.start(h.config())
	h.expect(t, map[string][]expected{"r1": {{EventDecided, 2, "accepted"}}, "r2": {{EventDecided, 2, "rejected"}}})
	if n := len(h.recv.all()); n != 2 {
		t.Errorf("%d requests for 2 webhooks", n)
	}
	if ds := h.deliveries(Query{}); len(ds) != 2 {
		t.Errorf("%d deliveries", len(ds))
	}
}

// TestFromNow: a notifier that never ran starts at the end of the ledger:
// decisions made before it are not sent, those after it are.
func TestFromNow(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.submit("before", "caption_suggestion")
	h.find("before", domain.DecisionAccepted)
	h.submit("across", "caption_suggestion")
	cfg := h.config()
	cfg.From = FromNow
	n, _ := h.start(cfg)
	clocktest.Eventually(t, "the notifier to start", func() bool { return testutil.ToFloat64(n.metrics.active) == 1 })
	clocktest.Eventually(t, "its checkpoint", func() bool {
		var count int
		_ = h.pool.QueryRow(context.Background(), `SELECT count(*) FROM notify_checkpoint`).Scan(&count)
		return count == 1
	})
	h.find("across", domain.DecisionRejected)
	h.expect(t, map[string][]expected{"across": {{EventDecided, 2, "rejected"}}})
}

// TestOneActiveNotifier: of two notifiers on one database one sends; when
// it stops, the other takes over.
func TestOneActiveNotifier(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	first, stopFirst := h.start(h.config())
	clocktest.Eventually(t, "the first to be active", func() bool { return testutil.ToFloat64(first.metrics.active) == 1 })
	second, _ := h.start(h.config())
	h.submit("o1", "caption_suggestion")
	h.find("o1", domain.DecisionAccepted)
	h.expect(t, map[string][]expected{"o1": {{EventDecided, 2, "accepted"}}})
	if testutil.ToFloat64(second.metrics.active) != 0 || testutil.ToFloat64(second.metrics.attempts.WithLabelValues(outcomeDelivered)) != 0 {
		t.Error("the second notifier is active while the first is")
	}
	stopFirst()
	clocktest.Eventually(t, "the second to take over", func() bool { return testutil.ToFloat64(second.metrics.active) == 1 })
	h.submit("o2", "caption_suggestion")
	h.find("o2", domain.DecisionAccepted)
	h.expect(t, map[string][]expected{"o1": {{EventDecided, 2, "accepted"}}, "o2": {{EventDecided, 2, "accepted"}}})
}

// TestSlowReceiverBoundsConcurrency: a receiver that answers no one holds
// at most Concurrency requests, each cut at the timeout and retried; once
// it answers, every webhook is delivered.
func TestSlowReceiverBoundsConcurrency(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	release := make(chan struct{})
	h.recv.setAnswer(func(received, int) (int, http.Header) {
		select {
		case <-release:
		case <-time.After(time.Second):
		}
		return http.StatusOK, nil
	})
	cfg := h.config()
	cfg.Concurrency = 3
	cfg.Timeout = 300 * time.Millisecond
	// The notifier's own client, its connections counted as it dials
	// and closes them.
	var conns connCounter
	cfg.Client = newClient(cfg.Concurrency, cfg.Timeout)
	cfg.Client.Transport.(*http.Transport).DialContext = conns.dial
	n, _ := h.start(cfg)
	want := map[string][]expected{}
	for i := range 10 {
		id := fmt.Sprintf("s%d", i)
		h.submit(id, "caption_suggestion")
		h.find(id, domain.DecisionAccepted)
		want[id] = []expected{{EventDecided, 2, "accepted"}}
	}
	clocktest.Eventually(t, "timeouts", func() bool { return testutil.ToFloat64(n.metrics.attempts.WithLabelValues(outcomeRetry)) >= 6 })
	ds := h.deliveries(Query{State: StateRetrying})
	if len(ds) == 0 || ds[0].LastError == nil || *ds[0].LastError != "no answer within 300ms" {
		t.Errorf("retrying: %+v (last error %q)", ds, lastError(ds))
	}
	close(release)
	h.expect(t, want)
	if most := conns.most(); most > 3 || most == 0 {
		t.Errorf("%d connections open at once, Concurrency 3", most)
	}
}

func lastError(ds []Delivery) string {
	if len(ds) == 0 || ds[0].LastError == nil {
		return ""
	}
	return *ds[0].LastError
}

// connCounter counts the connections a transport holds open.
type connCounter struct {
	mu         sync.Mutex
	open, peak int
}

func (c *connCounter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.open++
	c.peak = max(c.peak, c.open)
	c.mu.Unlock()
	return &countedConn{Conn: conn, c: c}, nil
}

func (c *connCounter) most() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peak
}

type countedConn struct {
	net.Conn
	c    *connCounter
	once sync.Once
}

func (cc *countedConn) Close() error {
	cc.once.Do(func() {
		cc.c.mu.Lock()
		cc.c.open--
		cc.c.mu.Unlock()
	})
	return cc.Conn.Close()
}
