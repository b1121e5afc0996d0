package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/domain"
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
	wantKeys(t, top, "items")
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
	if rec := h.do("GET", "/v1/manual-queue?content_class=transcript_import", moderatorToken, ""); rec.Body.String() != `{"items":[]}`+"\n" {
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
	if rec := open.do("GET", "/v1/manual-queue?content_class=podcast", moderatorToken, ""); rec.Code != http.StatusOK || rec.Body.String() != `{"items":[]}`+"\n" {
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
	// The queue shows the live claim.
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

func TestReadModelsMissing(t *testing.T) {
	h := newHarness(t)
	wantProblem(t, h.do("GET", "/v1/slo", auditorToken, ""), http.StatusServiceUnavailable, "not-ready", "")
	wantProblem(t, h.do("GET", "/v1/manual-queue", moderatorToken, ""), http.StatusServiceUnavailable, "not-ready", "")
	wantProblem(t, h.do("POST", "/v1/manual-queue/a/claim", moderatorToken, ""), http.StatusServiceUnavailable, "not-ready", "")
}
