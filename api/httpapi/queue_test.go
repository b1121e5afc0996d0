package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/projections"
)

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// wantAtLeastKeys checks the contract's keys are there; more may follow.
func wantAtLeastKeys(t testing.TB, m map[string]json.RawMessage, want ...string) {
	t.Helper()
	for _, k := range want {
		if _, ok := m[k]; !ok {
			t.Errorf("key %q missing from %v", k, m)
		}
	}
}

var queueItemKeys = []string{"review_id", "content_class", "reason", "attempts", "escalated_at", "age_seconds", "claimed_by", "claim_expires_at"}

func TestManualQueue(t *testing.T) {
	h := newDBHarness(t)
	h.submit("cap-1", "caption_suggestion", "a")
	h.submit("rule-1", "publishing_rule", "b")
	h.now = t0.Add(30 * time.Second)
	h.escalate("cap-1", domain.ReasonAttemptsExhausted)
	h.now = t0.Add(60 * time.Second)
	h.escalate("rule-1", domain.ReasonHumanGate)
	h.submit("pending-1", "caption_suggestion", "c")
	h.catchUp()
	h.now = t0.Add(90 * time.Second)

	rec := h.do("GET", "/v1/manual-queue", moderatorToken, "")
	if rec.Code != http.StatusOK {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	top := keys(t, rec.Body.Bytes())
	wantKeys(t, top, "items", "now")
	if string(top["now"]) != `"2026-11-30T12:01:30Z"` {
		t.Fatalf("now %s", top["now"])
	}
	var items []map[string]json.RawMessage
	if err := json.Unmarshal(top["items"], &items); err != nil || len(items) != 2 {
		t.Fatalf("%s: %v", rec.Body, err)
	}
	for _, it := range items {
		wantAtLeastKeys(t, it, queueItemKeys...)
	}
	// Highest priority first (publishing_rule has priority 3).
	a, b := items[0], items[1]
	if string(a["review_id"]) != `"rule-1"` || string(a["reason"]) != `"human_gate"` || string(a["age_seconds"]) != "30" || string(a["claimed_by"]) != "null" {
		t.Fatalf("first item %v", a)
	}
	if string(b["review_id"]) != `"cap-1"` || string(b["age_seconds"]) != "60" || string(b["attempts"]) != "0" {
		t.Fatalf("second item %v", b)
	}

	rec = h.do("GET", "/v1/manual-queue?content_class=caption_suggestion&limit=1", moderatorToken, "")
	if rec.Code != http.StatusOK || !contains(rec.Body.String(), `"cap-1"`) || contains(rec.Body.String(), `"rule-1"`) {
		t.Fatalf("filtered: %d %s", rec.Code, rec.Body)
	}
	if rec := h.do("GET", "/v1/manual-queue?limit=1000", moderatorToken, ""); rec.Code != http.StatusOK {
		t.Fatalf("limit 1000: %d %s", rec.Code, rec.Body)
	}
	for _, q := range []string{"0", "1001", "ten", "-1"} {
		wantProblem(t, h.do("GET", "/v1/manual-queue?limit="+q, moderatorToken, ""), http.StatusBadRequest, "invalid-request", "limit")
	}
	if rec := h.do("GET", "/v1/manual-queue?content_class=transcript_import", moderatorToken, ""); !strings.HasPrefix(rec.Body.String(), `{"items":[],"now":`) {
		t.Fatalf("empty queue: %q", rec.Body)
	}
}

// TestUnknownClassQuery: a content_class the policy does not name is a 422
// naming the field, as on submit; without Config.Classes nothing is
// refused.
func TestUnknownClassQuery(t *testing.T) {
	h := newDBHarness(t)
	for _, path := range []string{"/v1/manual-queue?content_class=podcast", "/v1/slo?window=1h&content_class=podcast"} {
		p := wantProblem(t, h.do("GET", path, adminToken, ""), http.StatusUnprocessableEntity, "unknown-class", "content_class")
		if !contains(p.Detail, `"podcast"`) || !contains(p.Detail, "caption_suggestion") {
			t.Errorf("%s: detail %q", path, p.Detail)
		}
	}
	// Authentication and roles come first.
	wantProblem(t, h.do("GET", "/v1/slo?content_class=podcast", "", ""), http.StatusUnauthorized, "unauthenticated", "")
	wantProblem(t, h.do("GET", "/v1/manual-queue?content_class=podcast", auditorToken, ""), http.StatusForbidden, "forbidden", "")

	open := newDBHarness(t, func(c *Config, _ *Deps) { c.Classes = nil })
	if rec := open.do("GET", "/v1/manual-queue?content_class=podcast", moderatorToken, ""); rec.Code != http.StatusOK || !strings.HasPrefix(rec.Body.String(), `{"items":[],"now":`) {
		t.Fatalf("without Classes: %d %s", rec.Code, rec.Body)
	}
	if _, err := New(Config{Classes: []string{"a", ""}}, Deps{Ledger: open.ledger, Reviews: open.runner}); err == nil || !contains(err.Error(), "classes") {
		t.Fatalf("an empty class name: %v", err)
	}
}

func TestClaim(t *testing.T) {
	h := newDBHarness(t, func(c *Config, _ *Deps) { c.ClaimLease = 5 * time.Minute })
	h.submit("a", "caption_suggestion", "x")
	h.escalate("a", domain.ReasonAttemptsExhausted)
	h.submit("pending", "caption_suggestion", "y")
	h.catchUp()

	rec := h.do("POST", "/v1/manual-queue/a/claim", moderatorToken, "")
	if rec.Code != http.StatusOK {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	wantAtLeastKeys(t, keys(t, rec.Body.Bytes()), "review_id", "claimed_by", "claim_expires_at")
	var c struct {
		ClaimedBy      string    `json:"claimed_by"`
		ClaimExpiresAt time.Time `json:"claim_expires_at"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &c); err != nil || c.ClaimedBy != "mona" || !c.ClaimExpiresAt.Equal(t0.Add(5*time.Minute)) {
		t.Fatalf("claim %+v %v", c, err)
	}
	// The queue shows the live claim once projected.
	h.catchUp()
	if q := h.do("GET", "/v1/manual-queue", moderatorToken, "").Body.String(); !contains(q, `"claimed_by":"mona"`) {
		t.Fatalf("queue %s", q)
	}
	// Another moderator while the lease is live: 409.
	wantProblem(t, h.do("POST", "/v1/manual-queue/a/claim", moderator2, ""), http.StatusConflict, "claimed-by-other", "")
	// The same moderator renews.
	if rec := h.do("POST", "/v1/manual-queue/a/claim", moderatorToken, ""); rec.Code != http.StatusOK {
		t.Fatalf("renew: %d %s", rec.Code, rec.Body)
	}
	// After the lease, another moderator may claim.
	h.now = t0.Add(6 * time.Minute)
	if rec := h.do("POST", "/v1/manual-queue/a/claim", moderator2, ""); rec.Code != http.StatusOK || !contains(rec.Body.String(), `"claimed_by":"max"`) {
		t.Fatalf("after the lease: %d %s", rec.Code, rec.Body)
	}
	wantProblem(t, h.do("POST", "/v1/manual-queue/zz/claim", moderatorToken, ""), http.StatusNotFound, "review-not-found", "")
	wantProblem(t, h.do("POST", "/v1/manual-queue/pending/claim", moderatorToken, ""), http.StatusConflict, "not-in-manual-review", "")
	wantProblem(t, h.do("POST", "/v1/manual-queue/a%2Fb/claim", moderatorToken, ""), http.StatusBadRequest, "invalid-review-id", "review_id")
}

func TestSLO(t *testing.T) {
	h := newDBHarness(t)
	h.submit("s1", "caption_suggestion", "a")
	h.submit("s2", "caption_suggestion", "b")
	h.submit("s3", "transcript_import", "c")
	h.now = t0.Add(10 * time.Second)
	h.escalate("s2", domain.ReasonAttemptsExhausted)
	h.catchUp()
	h.now = t0.Add(5 * time.Minute)

	rec := h.do("GET", "/v1/slo?window=15m&content_class=caption_suggestion", auditorToken, "")
	if rec.Code != http.StatusOK {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	top := keys(t, rec.Body.Bytes())
	wantAtLeastKeys(t, top, "total", "completed_within_budget", "within_budget_ratio", "escalated", "conflicting_completions", "latency_ms", "manual_queue")
	wantKeys(t, keys(t, top["latency_ms"]), "p50", "p90", "p99")
	wantKeys(t, keys(t, top["manual_queue"]), "depth", "oldest_age_seconds")
	for k, want := range map[string]string{"total": "2", "escalated": "1", "completed_within_budget": "0", "within_budget_ratio": "0", "conflicting_completions": "0"} {
		if string(top[k]) != want {
			t.Errorf("%s = %s, want %s (%s)", k, top[k], want, rec.Body)
		}
	}
	if mq := string(top["manual_queue"]); mq != `{"depth":1,"oldest_age_seconds":290}` {
		t.Errorf("manual_queue %s", mq)
	}
	if rec := h.do("GET", "/v1/slo", moderatorToken, ""); rec.Code != http.StatusOK || !contains(rec.Body.String(), `"total":3`) {
		t.Fatalf("default window, every class: %d %s", rec.Code, rec.Body)
	}
	for _, q := range []string{"?window=7d", "?window=90s", "?window=1h30m"} {
		if rec := h.do("GET", "/v1/slo"+q, moderatorToken, ""); rec.Code != http.StatusOK {
			t.Fatalf("%q: %d %s", q, rec.Code, rec.Body)
		}
	}
	for _, q := range []string{"soon", "-1h", "0s", "367d", "1.5d", "106751991167301d", "d"} {
		wantProblem(t, h.do("GET", "/v1/slo?window="+q, auditorToken, ""), http.StatusBadRequest, "invalid-request", "window")
	}
}

// TestSLOSeries: GET /v1/slo/series answers what the read models say
// (projections tests compare that with the ledger), with the objective
// of the policy, and refuses bad windows and steps naming them.
func TestSLOSeries(t *testing.T) {
	h := newDBHarness(t, func(_ *Config, d *Deps) {
		d.ReadModels = d.ReadModels.(*projections.DB).WithObjectives(map[string]float64{"caption_suggestion": 0.95})
	})
	h.submit("s1", "caption_suggestion", "a")
	h.submit("s2", "caption_suggestion", "b")
	h.now = t0.Add(10 * time.Second)
	h.escalate("s2", domain.ReasonAttemptsExhausted)
	h.catchUp()
	h.now = t0.Add(7 * time.Minute)

	rec := h.do("GET", "/v1/slo/series?window=30m&step=5m&content_class=caption_suggestion", auditorToken, "")
	if rec.Code != http.StatusOK {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	var got projections.Series
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	want, err := h.srv.deps.ReadModels.SLOSeries(context.Background(), 30*time.Minute, 5*time.Minute, "caption_suggestion", h.now)
	if err != nil {
		t.Fatal(err)
	}
	wantJSON, _ := json.Marshal(want)
	gotJSON, _ := json.Marshal(got)
	if string(gotJSON) != string(wantJSON) {
		t.Fatalf("series\n%s\nwant\n%s", gotJSON, wantJSON)
	}
	if got.Objective != 0.95 || got.StepSeconds != 300 || len(got.Points) != 7 {
		t.Fatalf("objective %v, step %d s, %d points", got.Objective, got.StepSeconds, len(got.Points))
	}
	var total, escalated, depth int64
	for _, p := range got.Points {
		total, escalated = total+p.Total, escalated+p.Escalated
		depth = p.ManualQueue.Depth
	}
	if total != 2 || escalated != 1 || depth != 1 {
		t.Errorf("series totals %d, escalated %d, queue at the end %d; want 2, 1, 1: %s", total, escalated, depth, rec.Body)
	}
	top := keys(t, rec.Body.Bytes())
	wantKeys(t, top, "content_class", "from", "to", "step_seconds", "objective", "points")

	// Without a step, the default window and step keep to 300 points.
	rec = h.do("GET", "/v1/slo/series", moderatorToken, "")
	if err := json.Unmarshal(rec.Body.Bytes(), &got); rec.Code != http.StatusOK || err != nil || got.StepSeconds != 300 || len(got.Points) != 289 {
		t.Fatalf("defaults: %d, step %d s, %d points", rec.Code, got.StepSeconds, len(got.Points))
	}
	for _, q := range []string{"window=7d&step=1h", "window=1h&step=1m", "window=30d&step=1d", "window=90s"} {
		if rec := h.do("GET", "/v1/slo/series?"+q, moderatorToken, ""); rec.Code != http.StatusOK {
			t.Errorf("%q: %d %s", q, rec.Code, rec.Body)
		}
	}
	for q, field := range map[string]string{
		"step=30s": "step", "step=90s": "step", "step=soon": "step", "step=0d": "step",
		"window=2d&step=1m": "step", "window=-1h": "window",
	} {
		wantProblem(t, h.do("GET", "/v1/slo/series?"+q, auditorToken, ""), http.StatusBadRequest, "invalid-request", field)
	}
	wantProblem(t, h.do("GET", "/v1/slo/series?content_class=podcast", auditorToken, ""), http.StatusUnprocessableEntity, "unknown-class", "content_class")
}

// TestSLOAttempts: GET /v1/slo/attempts is the attempt service-time
// distribution per class.
func TestSLOAttempts(t *testing.T) {
	h := newDBHarness(t)
	h.submit("s1", "caption_suggestion", "a")
	h.now = t0.Add(10 * time.Second)
	h.escalate("s1", domain.ReasonAttemptsExhausted)
	h.catchUp()
	rec := h.do("GET", "/v1/slo/attempts?window=1h", auditorToken, "")
	if rec.Code != http.StatusOK {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	wantKeys(t, keys(t, rec.Body.Bytes()), "from", "to", "classes")
	var body attemptsView
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	want, err := h.db.AttemptServiceTimes(context.Background(), "", time.Hour, h.now)
	if err != nil {
		t.Fatal(err)
	}
	if g, w := fmt.Sprint(body.Classes), fmt.Sprint(want); g != w {
		t.Errorf("classes %s, want %s", g, w)
	}
	wantProblem(t, h.do("GET", "/v1/slo/attempts?window=0s", auditorToken, ""), http.StatusBadRequest, "invalid-request", "window")
}

func TestReadModelsMissing(t *testing.T) {
	h := newHarness(t)
	wantProblem(t, h.do("GET", "/v1/slo", auditorToken, ""), http.StatusServiceUnavailable, "not-ready", "")
	wantProblem(t, h.do("GET", "/v1/manual-queue", moderatorToken, ""), http.StatusServiceUnavailable, "not-ready", "")
	wantProblem(t, h.do("POST", "/v1/manual-queue/bulk/requeue", moderatorToken, `{"filter":{},"dry_run":true}`), http.StatusServiceUnavailable, "not-ready", "")
	wantProblem(t, h.do("POST", "/v1/manual-queue/bulk/release", moderatorToken, `{"items":[{"review_id":"a"}]}`), http.StatusServiceUnavailable, "not-ready", "")
	wantProblem(t, h.do("GET", "/v1/manual-queue/events", moderatorToken, ""), http.StatusServiceUnavailable, "not-ready", "")
}
