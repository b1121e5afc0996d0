package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/reviewledger/reviewledger/domain"
)

func TestSubmit(t *testing.T) {
	h := newHarness(t)
	body := submitJSON("r-1.a:b_c", "caption_suggestion", "hello")

	rec := h.do("POST", "/v1/reviews", submitterToken, body, "X-Request-Id", "req-42")
	if rec.Code != http.StatusAccepted {
		t.Fatalf("new: %d %s", rec.Code, rec.Body)
	}
	m := keys(t, rec.Body.Bytes())
	wantKeys(t, m, "review_id", "state", "content_class", "attempts", "version", "submitted_at", "deadline", "decided_at", "reasons")
	if string(m["decided_at"]) != "null" || string(m["reasons"]) != "[]" || string(m["state"]) != `"pending"` {
		t.Fatalf("new review view: %s", rec.Body)
	}
	v := decode[reviewView](t, rec)
	if v.ReviewID != "r-1.a:b_c" || v.ContentClass != "caption_suggestion" || !v.SubmittedAt.Equal(t0) || !v.Deadline.Equal(t0.Add(30e9)) {
		t.Fatalf("view %+v", v)
	}
	if rec.Header().Get("Location") != "/v1/reviews/r-1.a:b_c" || rec.Header().Get("X-Request-Id") != "req-42" {
		t.Fatalf("headers %v", rec.Header())
	}

	// The acting name and request ID are recorded with the event.
	hist, err := h.ledger.History(context.Background(), "r-1.a:b_c")
	if err != nil {
		t.Fatal(err)
	}
	if md := hist.Events[0].Metadata; md.Actor != "platform" || md.RequestID != "req-42" {
		t.Fatalf("metadata %+v", md)
	}

	// The same review again: 200 with the same view.
	again := h.do("POST", "/v1/reviews", submitterToken, body)
	if again.Code != http.StatusOK || again.Body.String() != rec.Body.String() {
		t.Fatalf("same again: %d %s", again.Code, again.Body)
	}
	// Same ID, other content or class: 409.
	wantProblem(t, h.do("POST", "/v1/reviews", submitterToken, submitJSON("r-1.a:b_c", "caption_suggestion", "other")), http.StatusConflict, "review-exists", "")
	wantProblem(t, h.do("POST", "/v1/reviews", submitterToken, submitJSON("r-1.a:b_c", "transcript_import", "hello")), http.StatusConflict, "review-exists", "")
	// Admin may submit too.
	if rec := h.do("POST", "/v1/reviews", adminToken, submitJSON("r2", "caption_suggestion", "x")); rec.Code != http.StatusAccepted {
		t.Fatalf("admin submit: %d %s", rec.Code, rec.Body)
	}
}

func TestSubmitRefusesBadInput(t *testing.T) {
	h := newHarness(t)
	long := strings.Repeat("a", 129)
	for _, tc := range []struct {
		name, body string
		status     int
		kind       string
		field      string
	}{
		{"unknown class", submitJSON("r1", "poetry", "x"), 422, "unknown-class", "content_class"},
		{"empty id", submitJSON("", "caption_suggestion", "x"), 400, "invalid-review-id", "review_id"},
		{"bad id", submitJSON("a/b", "caption_suggestion", "x"), 400, "invalid-review-id", "review_id"},
		{"space in id", submitJSON("a b", "caption_suggestion", "x"), 400, "invalid-review-id", "review_id"},
		{"long id", submitJSON(long, "caption_suggestion", "x"), 400, "invalid-review-id", "review_id"},
		{"no class", `{"review_id":"r1","content":"x"}`, 400, "invalid-request", "content_class"},
		{"no content", `{"review_id":"r1","content_class":"caption_suggestion"}`, 400, "invalid-request", "content"},
		{"null content", `{"review_id":"r1","content_class":"caption_suggestion","content":null}`, 400, "invalid-request", "content"},
		{"number content", `{"review_id":"r1","content_class":"caption_suggestion","content":7}`, 400, "invalid-request", "content"},
		{"id not a string", `{"review_id":7,"content_class":"caption_suggestion","content":"x"}`, 400, "invalid-request", "review_id"},
		{"bad content type", `{"review_id":"r1","content_class":"caption_suggestion","content_type":"not a type","content":"x"}`, 400, "invalid-request", "content_type"},
		{"malformed", `{"review_id":`, 400, "invalid-request", "body"},
		{"array", `[1,2]`, 400, "invalid-request", "body"},
		{"empty body", ``, 400, "invalid-request", "body"},
		{"trailing data", submitJSON("r1", "caption_suggestion", "x") + `{}`, 400, "invalid-request", "body"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantProblem(t, h.do("POST", "/v1/reviews", submitterToken, tc.body), tc.status, tc.kind, tc.field)
		})
	}
	// An object is reviewed as sent; content_type defaults to text/plain.
	if rec := h.do("POST", "/v1/reviews", submitterToken, `{"review_id":"obj","content_class":"caption_suggestion","content":{"a":1},"extra":true}`); rec.Code != http.StatusAccepted {
		t.Fatalf("object content: %d %s", rec.Code, rec.Body)
	}
	hist, err := h.ledger.History(context.Background(), "obj")
	if err != nil {
		t.Fatal(err)
	}
	if sub, ok := hist.Events[0].Event.(domain.Submitted); !ok || sub.ContentType != "text/plain" {
		t.Fatalf("default content type not recorded: %#v", hist.Events[0].Event)
	}
}

func TestSubmitBodyLimit(t *testing.T) {
	h := newHarness(t, func(c *Config, _ *Deps) { c.MaxBodyBytes = 200 })
	big := submitJSON("r1", "caption_suggestion", strings.Repeat("x", 300))
	// Declared length over the limit: refused before reading.
	wantProblem(t, h.do("POST", "/v1/reviews", submitterToken, big), http.StatusRequestEntityTooLarge, "body-too-large", "")
	// Undeclared length (chunked): stopped by the reader at the limit.
	req := httptest.NewRequest("POST", "/v1/reviews", struct{ *strings.Reader }{strings.NewReader(big)})
	req.ContentLength = -1
	req.Header.Set("Authorization", "Bearer "+submitterToken)
	rec := httptest.NewRecorder()
	h.srv.Handler().ServeHTTP(rec, req)
	wantProblem(t, rec, http.StatusRequestEntityTooLarge, "body-too-large", "")
	// Exactly at the limit is fine.
	small := submitJSON("r1", "caption_suggestion", "")
	small = strings.Replace(small, `"content":""`, `"content":"`+strings.Repeat("y", 200-len(small))+`"`, 1)
	if len(small) != 200 {
		t.Fatalf("test body is %d bytes", len(small))
	}
	if rec := h.do("POST", "/v1/reviews", submitterToken, small); rec.Code != http.StatusAccepted {
		t.Fatalf("at the limit: %d %s", rec.Code, rec.Body)
	}
	if _, err := h.ledger.Load(context.Background(), "r1"); err != nil {
		t.Fatal(err)
	}
	// Callbacks and decisions share the limit.
	wantProblem(t, h.do("POST", "/v1/reviews/r1/findings", "", big), http.StatusRequestEntityTooLarge, "body-too-large", "")
	wantProblem(t, h.do("POST", "/v1/reviews/r1/decision", moderatorToken, big), http.StatusRequestEntityTooLarge, "body-too-large", "")
}

func TestSubmitAdmissionControl(t *testing.T) {
	h := newHarness(t, func(c *Config, _ *Deps) { c.MaxInFlight = 2; c.RetryAfter = 1500e6 })
	h.submit("old", "caption_suggestion", "x")
	h.runner.inFlight.Store(2)
	rec := h.do("POST", "/v1/reviews", submitterToken, submitJSON("new", "caption_suggestion", "x"))
	wantProblem(t, rec, http.StatusTooManyRequests, "overloaded", "")
	if rec.Header().Get("Retry-After") != "2" {
		t.Fatalf("Retry-After %q, want 2", rec.Header().Get("Retry-After"))
	}
	if m := h.do("GET", "/metrics", "", "").Body.String(); !strings.Contains(m, "\nreviewledger_admission_rejected_total 1\n") {
		t.Fatalf("admission not counted:\n%s", m)
	}
	// Submitting an existing review again adds no work: still answered.
	if rec := h.do("POST", "/v1/reviews", submitterToken, submitJSON("old", "caption_suggestion", "x")); rec.Code != http.StatusOK {
		t.Fatalf("repeat under load: %d %s", rec.Code, rec.Body)
	}
	h.runner.inFlight.Store(1)
	if rec := h.do("POST", "/v1/reviews", submitterToken, submitJSON("new", "caption_suggestion", "x")); rec.Code != http.StatusAccepted {
		t.Fatalf("below the ceiling: %d %s", rec.Code, rec.Body)
	}
}

func TestGetReview(t *testing.T) {
	h := newHarness(t)
	h.submit("r1", "caption_suggestion", "x")
	for _, tok := range []string{submitterToken, moderatorToken, auditorToken, adminToken} {
		rec := h.do("GET", "/v1/reviews/r1", tok, "")
		if rec.Code != http.StatusOK {
			t.Fatalf("%d %s", rec.Code, rec.Body)
		}
		wantKeys(t, keys(t, rec.Body.Bytes()), "review_id", "state", "content_class", "attempts", "version", "submitted_at", "deadline", "decided_at", "reasons")
	}
	wantProblem(t, h.do("GET", "/v1/reviews/nope", submitterToken, ""), http.StatusNotFound, "review-not-found", "")
	wantProblem(t, h.do("GET", "/v1/reviews/a%20b", submitterToken, ""), http.StatusBadRequest, "invalid-review-id", "review_id")
	wantProblem(t, h.do("GET", "/v1/reviews/"+strings.Repeat("a", 129), submitterToken, ""), http.StatusBadRequest, "invalid-review-id", "review_id")
}

func TestGetEvents(t *testing.T) {
	h := newHarness(t)
	h.submit("r1", "caption_suggestion", "x")
	h.escalate("r1", "attempts_exhausted")
	rec := h.do("GET", "/v1/reviews/r1/events", auditorToken, "")
	if rec.Code != http.StatusOK {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	top := keys(t, rec.Body.Bytes())
	wantKeys(t, top, "review_id", "events")
	var events []map[string]json.RawMessage
	if err := json.Unmarshal(top["events"], &events); err != nil {
		t.Fatal(err)
	}
	if len(events) != 2 {
		t.Fatalf("events %s", top["events"])
	}
	for i, e := range events {
		if i == 0 {
			// The Submitted names its policy snapshot by digest; the
			// snapshot is beside it.
			wantKeys(t, e, "version", "type", "recorded_at", "data", "policy")
		} else {
			wantKeys(t, e, "version", "type", "recorded_at", "data")
		}
		if string(e["version"]) != []string{"0", "1"}[i] || string(e["type"]) != []string{`"Submitted"`, `"Escalated"`}[i] {
			t.Fatalf("event %d: %v", i, e)
		}
	}
	var sub map[string]any
	if err := json.Unmarshal(events[0]["data"], &sub); err != nil || sub["review_id"] != "r1" || sub["payload_digest"] == nil {
		t.Fatalf("data is not the stored body: %s", events[0]["data"])
	}
	var pol domain.PolicySnapshot
	if err := json.Unmarshal(events[0]["policy"], &pol); err != nil || sub["policy"] != nil || sub["policy_digest"] != pol.Digest() || pol.BudgetMS == 0 {
		t.Fatalf("policy %s (%v) is not the snapshot data names by digest: %s", events[0]["policy"], err, events[0]["data"])
	}
	wantProblem(t, h.do("GET", "/v1/reviews/nope/events", auditorToken, ""), http.StatusNotFound, "review-not-found", "")
	wantProblem(t, h.do("GET", "/v1/reviews/r1/events", submitterToken, ""), http.StatusForbidden, "forbidden", "")
}
