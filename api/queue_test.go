package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func TestManualQueue(t *testing.T) {
	h := newHarness(t)
	h.rm.queue = []QueueItem{
		{ReviewID: "a", ContentClass: "publishing_rule", Reason: "human_gate", Attempts: 1, Priority: 3, EscalatedAt: t0.Add(-90 * time.Second),
			ClaimedBy: "max", ClaimExpiresAt: t0.Add(time.Minute)},
		{ReviewID: "b", ContentClass: "caption_suggestion", Reason: "attempts_exhausted", Attempts: 3, Priority: 1, EscalatedAt: t0.Add(-time.Hour),
			ClaimedBy: "mona", ClaimExpiresAt: t0.Add(-time.Second)},
	}
	rec := h.do("GET", "/v1/manual-queue", moderatorToken, "")
	if rec.Code != http.StatusOK {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	if h.rm.gotLimit != DefaultQueueLimit || h.rm.gotClass != "" {
		t.Fatalf("query limit %d class %q", h.rm.gotLimit, h.rm.gotClass)
	}
	var body struct{ Items []map[string]json.RawMessage }
	wantKeys(t, keys(t, rec.Body.Bytes()), "items")
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || len(body.Items) != 2 {
		t.Fatalf("%s: %v", rec.Body, err)
	}
	for _, it := range body.Items {
		wantKeys(t, it, "review_id", "content_class", "reason", "attempts", "escalated_at", "age_seconds", "claimed_by", "claim_expires_at")
	}
	a, b := body.Items[0], body.Items[1]
	if string(a["review_id"]) != `"a"` || string(a["age_seconds"]) != "90" || string(a["claimed_by"]) != `"max"` {
		t.Fatalf("item a %v", a)
	}
	// An expired lease is no claim.
	if string(b["claimed_by"]) != "null" || string(b["claim_expires_at"]) != "null" || string(b["age_seconds"]) != "3600" {
		t.Fatalf("item b %v", b)
	}

	if rec := h.do("GET", "/v1/manual-queue?content_class=caption_suggestion&limit=1000", moderatorToken, ""); rec.Code != http.StatusOK ||
		h.rm.gotLimit != 1000 || h.rm.gotClass != "caption_suggestion" {
		t.Fatalf("%d limit %d class %q", rec.Code, h.rm.gotLimit, h.rm.gotClass)
	}
	for _, q := range []string{"0", "1001", "ten", "-1"} {
		wantProblem(t, h.do("GET", "/v1/manual-queue?limit="+q, moderatorToken, ""), http.StatusBadRequest, "invalid-request", "limit")
	}
	h.rm.queue = nil
	if rec := h.do("GET", "/v1/manual-queue", moderatorToken, ""); rec.Body.String() != `{"items":[]}`+"\n" {
		t.Fatalf("empty queue: %q", rec.Body)
	}
}

func TestClaim(t *testing.T) {
	h := newHarness(t, func(c *Config, _ *Deps) { c.ClaimLease = 5 * time.Minute })
	h.rm.queue = []QueueItem{{ReviewID: "a", ContentClass: "caption_suggestion", EscalatedAt: t0}}
	rec := h.do("POST", "/v1/manual-queue/a/claim", moderatorToken, "")
	if rec.Code != http.StatusOK {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	wantKeys(t, keys(t, rec.Body.Bytes()), "review_id", "claimed_by", "claim_expires_at")
	var c claimView
	if err := json.Unmarshal(rec.Body.Bytes(), &c); err != nil || c.ClaimedBy != "mona" || !c.ClaimExpiresAt.Equal(t0.Add(5*time.Minute)) {
		t.Fatalf("claim %+v %v", c, err)
	}
	// Another moderator while the lease is live: 409.
	wantProblem(t, h.do("POST", "/v1/manual-queue/a/claim", moderator2, ""), http.StatusConflict, "claimed-by-other", "")
	// The same moderator renews.
	if rec := h.do("POST", "/v1/manual-queue/a/claim", moderatorToken, ""); rec.Code != http.StatusOK {
		t.Fatalf("renew: %d %s", rec.Code, rec.Body)
	}
	// After the lease, another moderator may claim.
	h.now = t0.Add(6 * time.Minute)
	if rec := h.do("POST", "/v1/manual-queue/a/claim", moderator2, ""); rec.Code != http.StatusOK {
		t.Fatalf("after the lease: %d %s", rec.Code, rec.Body)
	}
	wantProblem(t, h.do("POST", "/v1/manual-queue/zz/claim", moderatorToken, ""), http.StatusNotFound, "review-not-found", "")
	wantProblem(t, h.do("POST", "/v1/manual-queue/a%2Fb/claim", moderatorToken, ""), http.StatusBadRequest, "invalid-review-id", "review_id")
}

func TestSLO(t *testing.T) {
	h := newHarness(t)
	h.rm.slo = SLOSummary{Total: 8, CompletedWithinBudget: 6, Escalated: 2, ConflictingCompletions: 1,
		LatencyP50MS: 120, LatencyP90MS: 480.5, LatencyP99MS: 2100, QueueDepth: 2, OldestAge: 95 * time.Second}
	rec := h.do("GET", "/v1/slo?window=15m&content_class=caption_suggestion", auditorToken, "")
	if rec.Code != http.StatusOK {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	top := keys(t, rec.Body.Bytes())
	wantKeys(t, top, "total", "completed_within_budget", "within_budget_ratio", "escalated", "conflicting_completions", "latency_ms", "manual_queue")
	wantKeys(t, keys(t, top["latency_ms"]), "p50", "p90", "p99")
	wantKeys(t, keys(t, top["manual_queue"]), "depth", "oldest_age_seconds")
	want := `{"total":8,"completed_within_budget":6,"within_budget_ratio":0.75,"escalated":2,"conflicting_completions":1,` +
		`"latency_ms":{"p50":120,"p90":480.5,"p99":2100},"manual_queue":{"depth":2,"oldest_age_seconds":95}}` + "\n"
	if rec.Body.String() != want {
		t.Fatalf("got  %s\nwant %s", rec.Body, want)
	}
	if h.rm.gotSLO.window != 15*time.Minute || h.rm.gotSLO.class != "caption_suggestion" {
		t.Fatalf("query %+v", h.rm.gotSLO)
	}
	for q, w := range map[string]time.Duration{"": time.Hour, "?window=7d": 7 * 24 * time.Hour, "?window=90s": 90 * time.Second} {
		if rec := h.do("GET", "/v1/slo"+q, moderatorToken, ""); rec.Code != http.StatusOK || h.rm.gotSLO.window != w {
			t.Fatalf("%q: %d window %s", q, rec.Code, h.rm.gotSLO.window)
		}
	}
	for _, q := range []string{"soon", "-1h", "0s", "91d", "1.5d"} {
		wantProblem(t, h.do("GET", "/v1/slo?window="+q, auditorToken, ""), http.StatusBadRequest, "invalid-request", "window")
	}
	// Nothing submitted: a ratio of 0, not NaN.
	h.rm.slo = SLOSummary{}
	if rec := h.do("GET", "/v1/slo", auditorToken, ""); !contains(rec.Body.String(), `"within_budget_ratio":0,`) {
		t.Fatalf("empty window: %s", rec.Body)
	}
}

func TestReadModelsMissing(t *testing.T) {
	h := newHarness(t, func(_ *Config, d *Deps) { d.ReadModels = nil })
	wantProblem(t, h.do("GET", "/v1/slo", auditorToken, ""), http.StatusServiceUnavailable, "not-ready", "")
	wantProblem(t, h.do("GET", "/v1/manual-queue", moderatorToken, ""), http.StatusServiceUnavailable, "not-ready", "")
	wantProblem(t, h.do("POST", "/v1/manual-queue/a/claim", moderatorToken, ""), http.StatusServiceUnavailable, "not-ready", "")
}
