package main

// End-to-end tests of the decision webhooks: a receiver that fails, goes
// away and answers slowly gets every decision of 500 reviews exactly once
// after de-duplication, in order per review, each request verified by the
// Standard Webhooks reference library, across a serve killed and started
// again.

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// e2eNotifySecret signs the webhooks of the tests (REVIEWLEDGER_NOTIFY_SECRET).
var e2eNotifySecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("e2e-notify-key-0123456789abcdef"))

// notifyPolicy: reviews the provider accepts at once, and a human-gated
// class whose accepted reviews wait for a moderator.
const notifyPolicy = `classes:
  e2e_load:
    budget: 15s
    attempt_timeout: 5s
    max_attempts: 3
    backoff: {initial: 50ms, max: 500ms, jitter: 50ms}
    on_exhaustion: manual_review
    priority: 1
  e2e_gated:
    budget: 15s
    attempt_timeout: 5s
    max_attempts: 3
    backoff: {initial: 50ms, max: 500ms, jitter: 50ms}
    on_exhaustion: manual_review
    human_gate: true
    priority: 2
`

// webhook is one request the receiver verified.
type webhook struct {
	ID   string
	Type string
	Data reviewView
	Raw  []byte
}

// webhookReceiver is the platform's endpoint in these tests. Every request
// is verified with the reference library and recorded; it answers as its
// mode says, and can go away (its port refusing connections) and come
// back on the same address.
type webhookReceiver struct {
	addr string
	wh   *standardwebhooks.Webhook

	mu       sync.Mutex
	srv      *http.Server
	failLeft int           // answer this many more with a failure
	delay    time.Duration // answer after this long (every tenth after 1.5s)
	got      []webhook
	invalid  []string
	answered int
}

func newWebhookReceiver(t *testing.T, failFirst int) *webhookReceiver {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(e2eNotifySecret)
	if err != nil {
		t.Fatal(err)
	}
	addr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	r := &webhookReceiver{addr: addr, wh: wh, failLeft: failFirst}
	r.up(t)
	t.Cleanup(r.down)
	return r
}

func (r *webhookReceiver) URL() string { return "http://" + r.addr + "/hooks/reviews" }

// up serves on the receiver's address.
func (r *webhookReceiver) up(t *testing.T) {
	t.Helper()
	var l net.Listener
	clocktest.EventuallyShows(t, "the receiver back on "+r.addr, func() (bool, string) { // the port was ours a moment ago
		var err error
		if l, err = net.Listen("tcp", r.addr); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	srv := &http.Server{Handler: http.HandlerFunc(r.serve), ReadHeaderTimeout: 5 * time.Second}
	r.mu.Lock()
	r.srv = srv
	r.mu.Unlock()
	go func() { _ = srv.Serve(l) }()
}

// down closes the listener and every connection: attempts are refused.
func (r *webhookReceiver) down() {
	r.mu.Lock()
	srv := r.srv
	r.srv = nil
	r.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

func (r *webhookReceiver) setDelay(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.delay = d
}

func (r *webhookReceiver) serve(w http.ResponseWriter, req *http.Request) {
	raw, _ := io.ReadAll(req.Body)
	if err := r.wh.Verify(raw, req.Header); err != nil {
		r.mu.Lock()
		r.invalid = append(r.invalid, fmt.Sprintf("%s: %v", req.Header.Get("webhook-id"), err))
		r.mu.Unlock()
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	var body struct {
		Type string     `json:"type"`
		Data reviewView `json:"data"`
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		r.mu.Lock()
		r.invalid = append(r.invalid, "undecodable body: "+string(raw))
		r.mu.Unlock()
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.got = append(r.got, webhook{ID: req.Header.Get("webhook-id"), Type: body.Type, Data: body.Data, Raw: raw})
	n := len(r.got)
	fail := r.failLeft > 0
	if fail {
		r.failLeft--
	}
	delay := r.delay
	r.mu.Unlock()
	switch {
	case fail && n%4 == 0:
		w.Header().Set("Retry-After", "1")
		http.Error(w, "slow down", http.StatusTooManyRequests)
		return
	case fail:
		http.Error(w, "not today", http.StatusInternalServerError)
		return
	}
	if delay > 0 {
		if n%10 == 0 {
			delay = 1500 * time.Millisecond // past the notifier's timeout: it tries again
		}
		select {
		case <-time.After(delay):
		case <-req.Context().Done():
			return
		}
	}
	r.mu.Lock()
	r.answered++
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (r *webhookReceiver) requests() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

// distinct returns the first request of each webhook-id, in arrival order,
// and how many requests were redeliveries.
func (r *webhookReceiver) distinct() ([]webhook, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]bool{}
	var out []webhook
	for _, w := range r.got {
		if !seen[w.ID] {
			seen[w.ID] = true
			out = append(out, w)
		}
	}
	return out, len(r.got) - len(out)
}

func (r *webhookReceiver) invalidRequests() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.invalid)
}

// notifyEnv is the environment of a server sending webhooks to recv.
func notifyEnv(t *testing.T, dbURL, providerURL string, recv *webhookReceiver) map[string]string {
	t.Helper()
	env := baseServeEnv(t, dbURL, providerURL)
	policy := filepath.Join(t.TempDir(), "notify-policy.yaml")
	if err := os.WriteFile(policy, []byte(notifyPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	return merged(env, map[string]string{
		"REVIEWLEDGER_POLICY":                 policy,
		"REVIEWLEDGER_NOTIFY_URL":             recv.URL(),
		"REVIEWLEDGER_NOTIFY_SECRET":          e2eNotifySecret,
		"REVIEWLEDGER_NOTIFY_FROM":            "start",
		"REVIEWLEDGER_NOTIFY_CONCURRENCY":     "8",
		"REVIEWLEDGER_NOTIFY_TIMEOUT":         "1s",
		"REVIEWLEDGER_NOTIFY_BACKOFF_INITIAL": "100ms",
		"REVIEWLEDGER_NOTIFY_BACKOFF_MAX":     "1s",
		"REVIEWLEDGER_NOTIFY_RETRY_FOR":       "10m",
	})
}

// wantWebhook is a webhook the ledger's history calls for.
type wantWebhook struct {
	Type    string
	Version uint64
	State   string
}

// expectedWebhooks reads the review's history and returns the webhooks it
// calls for: manual_review when it was escalated, decided when a finding
// or a moderator decided it.
func expectedWebhooks(t *testing.T, p *serveProc, id string) []wantWebhook {
	t.Helper()
	var out []wantWebhook
	state := "pending"
	for _, e := range p.events(t, id) {
		next := state
		switch e.Type {
		case "FindingReceived":
			if s := e.field("state").(string); !(s == "accepted" && strings.HasPrefix(id, "n-gate")) {
				next = s
			}
		case "Escalated":
			next = e.field("state").(string)
		case "ManualDecisionRecorded":
			next = e.field("state").(string)
		}
		if next != state {
			typ := "review.decided"
			if next == "manual_review" {
				typ = "review.manual_review"
			}
			out = append(out, wantWebhook{typ, e.Version, next})
			state = next
		}
	}
	return out
}

// TestE2EWebhooksThroughFaults: 500 reviews, 400 decided by the provider
// and 100 human-gated ones a moderator decides, notified to a receiver
// that fails its first 40 requests (every fourth with 429 and
// Retry-After), then goes away while the serve process is killed and a
// new one started, then answers slowly (every tenth after the notifier's
// timeout). After de-duplication by webhook-id the receiver has every
// webhook the ledger calls for exactly once, in version order per
// review, each signed; the last one of each review carries the review
// view GET /v1/reviews/{id} answers. Meanwhile the admin route and the
// metrics show the failing deliveries.
func TestE2EWebhooksThroughFaults(t *testing.T) {
	t.Parallel()
	recv := newWebhookReceiver(t, 40)
	prov := newLoadProvider(t, 50*time.Millisecond, false)
	env := notifyEnv(t, dbtest.URL(t), prov.URL(), recv)
	first := startServe(t, env)

	auto, gated := reviewIDs("n-auto", 400), reviewIDs("n-gate", 100)
	var wg sync.WaitGroup
	wg.Go(func() { submitAll(t, []*serveProc{first}, auto, "e2e_load", 12) })
	wg.Go(func() { submitAll(t, []*serveProc{first}, gated, "e2e_gated", 4) })
	clocktest.EventuallyShows(t, "the receiver to fail 40 requests and take more", func() (bool, string) {
		return recv.requests() >= 150, fmt.Sprintf("%d requests", recv.requests())
	})
	recv.down()
	wg.Wait()
	// While the receiver is away, the failures are visible.
	clocktest.EventuallyShows(t, "failing deliveries listed with their error", func() (bool, string) {
		res := first.expect(t, http.StatusOK, http.MethodGet, "/v1/admin/deliveries?state=failing&limit=1000", tokAdmin, nil)
		var v struct {
			Deliveries []struct {
				State     string  `json:"state"`
				Attempts  int     `json:"attempts"`
				LastError *string `json:"last_error"`
			} `json:"deliveries"`
		}
		if err := json.Unmarshal(res.Body, &v); err != nil {
			t.Fatal(err)
		}
		refused := 0
		for _, d := range v.Deliveries {
			if d.State == "retrying" && d.Attempts > 0 && d.LastError != nil && strings.Contains(*d.LastError, "connection refused") {
				refused++
			}
		}
		return refused > 0, fmt.Sprintf("%d failing, %d refused", len(v.Deliveries), refused)
	})
	clocktest.EventuallyShows(t, "the retry backlog on /metrics", func() (bool, string) {
		v := metricValue(t, first, "reviewledger_notify_retry_backlog")
		return v > 0, fmt.Sprint(v)
	})
	if v := metricValue(t, first, "reviewledger_notify_oldest_undelivered_seconds"); v <= 0 {
		t.Errorf("oldest undelivered %v s while the receiver is away", v)
	}

	first.kill(t)
	second := startServe(t, env)
	time.Sleep(time.Second) // the notifier of the second process retries into a closed port
	recv.setDelay(100 * time.Millisecond)
	recv.up(t)

	// A moderator decides every review waiting for one.
	for i, id := range append(slices.Clone(auto), gated...) {
		v := settledState(t, []*serveProc{second}, id)
		if v.State != "manual_review" {
			continue
		}
		state := "accepted"
		if i%2 == 1 {
			state = "rejected"
		}
		second.expect(t, http.StatusOK, http.MethodPost, "/v1/reviews/"+id+"/decision", tokModerator,
			map[string]any{"state": state, "note": "e2e", "expected_version": v.Version})
	}

	want := map[string][]wantWebhook{}
	total := 0
	for _, id := range append(slices.Clone(auto), gated...) {
		want[id] = expectedWebhooks(t, second, id)
		total += len(want[id])
		if strings.HasPrefix(id, "n-gate") && len(want[id]) != 2 {
			t.Errorf("%s: history calls for %v", id, want[id])
		}
	}
	clocktest.WithinShows(t, 3*time.Minute, fmt.Sprintf("%d webhooks", total), func() (bool, string) {
		got, _ := recv.distinct()
		return len(got) >= total, fmt.Sprintf("%d of %d webhooks received", len(got), total)
	})
	clocktest.EventuallyShows(t, "no delivery left undelivered", func() (bool, string) {
		res := second.expect(t, http.StatusOK, http.MethodGet, "/v1/admin/deliveries?state=failing", tokAdmin, nil)
		pending := second.expect(t, http.StatusOK, http.MethodGet, "/v1/admin/deliveries?state=pending", tokAdmin, nil)
		empty := `{"deliveries":[]}` + "\n"
		return string(res.Body) == empty && string(pending.Body) == empty, string(res.Body) + string(pending.Body)
	})

	if bad := recv.invalidRequests(); len(bad) > 0 {
		t.Errorf("%d requests failed verification: %v", len(bad), bad[:min(5, len(bad))])
	}
	got, redelivered := recv.distinct()
	t.Logf("%d webhooks for 500 reviews in %d requests: %d redelivered", len(got), recv.requests(), redelivered)
	byReview := map[string][]wantWebhook{}
	last := map[string]webhook{}
	ofVersion := map[string]string{}
	for _, w := range got {
		id := w.Data.ReviewID
		byReview[id] = append(byReview[id], wantWebhook{w.Type, w.Data.Version, w.Data.State})
		last[id] = w
		key := fmt.Sprintf("%s@%d", id, w.Data.Version)
		if other, ok := ofVersion[key]; ok {
			t.Errorf("%s sent under two webhook-ids: %s and %s", key, other, w.ID)
		}
		ofVersion[key] = w.ID
	}
	for id, w := range want {
		if !slices.Equal(byReview[id], w) {
			t.Errorf("%s: received %v, the ledger calls for %v", id, byReview[id], w)
		}
	}
	for id := range byReview {
		if _, ok := want[id]; !ok {
			t.Errorf("webhooks for a review never submitted: %s", id)
		}
	}
	// The last webhook of a review carries the view the API answers.
	for _, id := range []string{auto[0], auto[399], gated[0], gated[99]} {
		res := second.expect(t, http.StatusOK, http.MethodGet, "/v1/reviews/"+id, tokSubmitter, nil)
		var data struct {
			Data json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(last[id].Raw, &data); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(bytes.TrimSpace(res.Body), data.Data) {
			t.Errorf("%s: webhook data %s, GET answers %s", id, data.Data, res.Body)
		}
		if strings.Contains(string(last[id].Raw), contentMarker) {
			t.Errorf("%s: the webhook carries content", id)
		}
	}
	if redelivered == 0 {
		t.Error("no webhook was sent twice: the faults missed the deliveries")
	}
	if v := metricValue(t, second, "reviewledger_notify_retry_backlog"); v != 0 {
		// Measured every 5s: give it one more round.
		clocktest.EventuallyShows(t, "the retry backlog to empty", func() (bool, string) {
			v := metricValue(t, second, "reviewledger_notify_retry_backlog")
			return v == 0, fmt.Sprint(v)
		})
	}
}
