package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/api/contentaccess"
	"github.com/reviewledger/reviewledger/api/engine"
	"github.com/reviewledger/reviewledger/api/ui/uitest"
	"github.com/reviewledger/reviewledger/domain"
)

// TestUIFakeFollowsServer is the contract test of the UI's fake API
// (uitest.FakeAPI, which the browser tests of package ui run against): it
// sends the requests the page makes to the fake and to the real server,
// seeded alike, and fails on any difference in status, Content-Type or the
// shape of the JSON body (see shapeDiff); of a problem+json body, the type,
// status and field must be equal too. Where they differ the fake is wrong:
// it must follow the server.
func TestUIFakeFollowsServer(t *testing.T) {
	h := newDBHarness(t)
	// The content route reads what was submitted (from memory here) and
	// records each read.
	contents := contractContents{}
	h.srv.deps.Content, h.srv.deps.ContentAccess = contents, contentaccess.New(h.pool)
	fake := uitest.NewFakeAPI(func() time.Time { return h.now })
	fake.SetClasses(harnessPolicy().Names()...)
	for _, tok := range testTokens {
		fake.AddToken(tok.Secret, string(tok.Role), tok.Name)
	}

	// The same state on both sides: a review escalated into the manual
	// queue, one of a four-eyes class, one waiting in the queue to be
	// decided, and one pending (sent back to automated review).
	for id, class := range map[string]string{"rev-queued": "caption_suggestion", "rev-rule": "publishing_rule",
		"rev-decide": "caption_suggestion", "rev-pending": "caption_suggestion"} {
		h.submit(id, class, "content of "+id)
		contents[id] = []byte("content of " + id)
	}
	h.now = t0.Add(30 * time.Second)
	h.escalate("rev-queued", domain.ReasonAttemptsExhausted)
	h.escalate("rev-rule", domain.ReasonHumanGate)
	h.escalate("rev-decide", domain.ReasonAttemptsExhausted)
	h.now = t0.Add(2 * time.Minute)
	h.catchUp()
	fake.Escalate("rev-queued", "caption_suggestion", "attempts_exhausted", 0, 90*time.Second, 1, nil)
	fake.Escalate("rev-rule", "publishing_rule", "human_gate", 0, 90*time.Second, 2, nil)
	fake.Escalate("rev-decide", "caption_suggestion", "attempts_exhausted", 0, 90*time.Second, 1, nil)
	fake.Escalate("rev-pending", "caption_suggestion", "attempts_exhausted", 0, 90*time.Second, 1, nil)
	fake.RequeueAs("rev-pending", "mona", "")
	// The fake answers GET /v1/slo with the figures set per window.
	for _, w := range []string{"", "1h", "15m", "24h", "7d"} {
		fake.SetSLO(w, uitest.SLOJSON{})
	}

	type request struct {
		method, path, token, body string
	}
	var reqs []request
	get := func(path string, tokens ...string) {
		for _, tok := range tokens {
			reqs = append(reqs, request{http.MethodGet, path, tok, ""})
		}
	}
	send := func(method, path, token, body string) {
		reqs = append(reqs, request{method, path, token, body})
	}
	// Every route: no token, a token the server does not know, and each
	// role it refuses.
	routes := []struct {
		method, path string
		allowed      []string
	}{
		{"GET", "/v1/me", []string{"submitter", "moderator", "auditor"}},
		{"GET", "/v1/slo", []string{"auditor", "moderator"}},
		{"GET", "/v1/slo/series", []string{"auditor", "moderator"}},
		{"GET", "/v1/slo/attempts", []string{"auditor", "moderator"}},
		{"GET", "/v1/slo/providers", []string{"auditor", "moderator"}},
		{"GET", "/v1/slo/providers/series", []string{"auditor", "moderator"}},
		{"GET", "/v1/manual-queue", []string{"moderator"}},
		{"GET", "/v1/manual-queue/events", []string{"moderator"}},
		{"GET", "/v1/reviews/rev-queued", []string{"submitter", "moderator", "auditor"}},
		{"GET", "/v1/reviews/rev-queued/events", []string{"auditor"}},
		{"GET", "/v1/reviews/rev-queued/content", []string{"moderator"}},
		{"GET", "/v1/reviews/rev-queued/timeline", []string{"moderator", "auditor"}},
		{"POST", "/v1/reviews/rev-queued/decision", []string{"moderator"}},
		{"POST", "/v1/manual-queue/rev-queued/claim", []string{"moderator"}},
		{"DELETE", "/v1/manual-queue/rev-queued/claim", []string{"moderator"}},
		{"POST", "/v1/manual-queue/rev-queued/requeue", []string{"moderator"}},
		{"POST", "/v1/manual-queue/rev-queued/hold", []string{"moderator"}},
		{"DELETE", "/v1/manual-queue/rev-queued/hold", []string{"moderator"}},
		{"POST", "/v1/manual-queue/bulk/requeue", []string{"moderator"}},
		{"POST", "/v1/manual-queue/bulk/release", []string{"moderator"}},
	}
	byRole := map[string]string{"submitter": submitterToken, "moderator": moderatorToken, "auditor": auditorToken}
	for _, r := range routes {
		send(r.method, r.path, "", "")
		send(r.method, r.path, "not-a-token-of-this-server", "")
		for _, role := range []string{"submitter", "moderator", "auditor"} {
			if !slices.Contains(r.allowed, role) {
				send(r.method, r.path, byRole[role], "")
			}
		}
	}

	get("/v1/me", submitterToken, moderatorToken, auditorToken, adminToken)

	for _, route := range []string{"/v1/slo", "/v1/slo/series", "/v1/slo/attempts", "/v1/slo/providers", "/v1/slo/providers/series"} {
		get(route, auditorToken, moderatorToken, adminToken)
		for _, q := range []string{"window=1h", "window=24h", "window=7d", "window=15m&content_class=caption_suggestion",
			"content_class=publishing_rule", "window=soon", "window=-1h", "window=0s", "window=367d", "content_class=podcast"} {
			get(route+"?"+q, auditorToken)
		}
	}
	for _, route := range []string{"/v1/slo/series", "/v1/slo/providers/series"} {
		for _, q := range []string{"window=1h&step=5m", "window=24h&step=1h", "window=7d&step=1d", "step=30s", "step=90s", "step=soon",
			"window=2d&step=1m"} {
			get(route+"?"+q, auditorToken)
		}
	}
	for _, route := range []string{"/v1/slo/providers", "/v1/slo/providers/series"} {
		for _, q := range []string{"provider=primary", "window=1h&provider=shadow-1&content_class=caption_suggestion", "provider=Bad", "provider=1st",
			"provider=" + strings.Repeat("p", 65)} {
			get(route+"?"+q, auditorToken)
		}
	}

	for _, q := range []string{"", "content_class=caption_suggestion", "content_class=transcript_import", "reason=human_gate",
		"reason=attempts_exhausted&content_class=caption_suggestion", "held=true", "held=false", "held=any", "order=priority",
		"order=due", "limit=1", "limit=1000", "content_class=podcast", "held=maybe", "order=id", "order=newest",
		"limit=0", "limit=1001", "limit=ten", "limit=-1", "reason=" + strings.Repeat("r", 65)} {
		get("/v1/manual-queue?"+q, moderatorToken)
	}
	get("/v1/manual-queue", adminToken)

	for _, id := range []string{"rev-queued", "rev-rule", "rev-pending", "rev-unknown"} {
		get("/v1/reviews/"+id, submitterToken, moderatorToken, auditorToken)
		get("/v1/reviews/"+id+"/events", auditorToken)
		get("/v1/reviews/"+id+"/content", moderatorToken)
		get("/v1/reviews/"+id+"/timeline", moderatorToken, auditorToken)
	}

	// Claims, holds, requeues and decisions, in an order that leaves both
	// sides alike after each step.
	for _, body := range []string{"", "{", `{"state":"accepted"}`, `{"state":"maybe","expected_version":1}`, `{"state":"accepted","expected_version":"one"}`} {
		send("POST", "/v1/reviews/rev-decide/decision", moderatorToken, body)
	}
	send("POST", "/v1/reviews/rev-unknown/decision", moderatorToken, `{"state":"accepted","expected_version":1}`)
	send("POST", "/v1/reviews/rev-pending/decision", moderatorToken, `{"state":"accepted","expected_version":2}`)
	send("POST", "/v1/reviews/rev-decide/decision", moderatorToken, `{"state":"accepted","expected_version":7}`)
	// A claim moves the version; a decision on the version after it (as
	// the page reads it once claimed) goes through.
	send("POST", "/v1/manual-queue/rev-decide/claim", moderatorToken, "")
	get("/v1/reviews/rev-decide", moderatorToken)
	send("POST", "/v1/reviews/rev-decide/decision", moderatorToken, `{"state":"accepted","expected_version":2,"note":"fine"}`)
	send("POST", "/v1/reviews/rev-decide/decision", moderatorToken, `{"state":"accepted","expected_version":3}`)
	send("POST", "/v1/reviews/rev-rule/decision", moderatorToken, `{"state":"rejected","expected_version":1,"note":"one of two"}`)
	send("POST", "/v1/reviews/rev-rule/decision", moderatorToken, `{"state":"rejected","expected_version":2}`)
	get("/v1/reviews/rev-rule/timeline", moderatorToken)

	send("POST", "/v1/manual-queue/rev-unknown/claim", moderatorToken, "")
	send("POST", "/v1/manual-queue/rev-unknown/claim", moderatorToken, "{")
	send("POST", "/v1/manual-queue/a%2Fb/claim", moderatorToken, "")
	send("POST", "/v1/reviews/a%2Fb/decision", moderatorToken, `{"state":"accepted","expected_version":1}`)
	get("/v1/reviews/a%2Fb", moderatorToken)
	send("POST", "/v1/manual-queue/rev-pending/claim", moderatorToken, "")
	send("DELETE", "/v1/manual-queue/rev-queued/claim", moderatorToken, "")
	send("POST", "/v1/manual-queue/rev-queued/claim", moderatorToken, "")
	send("POST", "/v1/manual-queue/rev-queued/claim", moderatorToken, "")
	send("POST", "/v1/manual-queue/rev-queued/claim", moderator2, "")
	send("DELETE", "/v1/manual-queue/rev-queued/claim", moderator2, "")
	get("/v1/manual-queue", moderatorToken)
	get("/v1/reviews/rev-queued/timeline", moderatorToken)
	send("DELETE", "/v1/manual-queue/rev-queued/claim", moderatorToken, "")
	send("DELETE", "/v1/manual-queue/rev-unknown/claim", moderatorToken, "")

	for _, body := range []string{"", "{", `{"note":""}`, `{"note":"   "}`} {
		send("POST", "/v1/manual-queue/rev-queued/hold", moderatorToken, body)
	}
	send("POST", "/v1/manual-queue/rev-unknown/hold", moderatorToken, `{"note":"wait"}`)
	send("POST", "/v1/manual-queue/rev-pending/hold", moderatorToken, `{"note":"wait"}`)
	send("DELETE", "/v1/manual-queue/rev-queued/hold", moderatorToken, "")
	send("POST", "/v1/manual-queue/rev-queued/hold", moderatorToken, `{"note":"asking legal"}`)
	send("POST", "/v1/manual-queue/rev-queued/hold", moderatorToken, `{"note":"again"}`)
	get("/v1/manual-queue?held=true", moderatorToken)
	get("/v1/manual-queue?held=any", moderatorToken)
	get("/v1/reviews/rev-queued/timeline", moderatorToken)
	send("DELETE", "/v1/manual-queue/rev-queued/hold", moderatorToken, "")
	send("DELETE", "/v1/manual-queue/rev-unknown/hold", moderatorToken, "")

	for _, body := range []string{"", "{", `{}`, `{"expected_version":"one"}`} {
		send("POST", "/v1/manual-queue/rev-queued/requeue", moderatorToken, body)
	}
	send("POST", "/v1/manual-queue/rev-unknown/requeue", moderatorToken, `{"expected_version":1}`)
	send("POST", "/v1/manual-queue/rev-pending/requeue", moderatorToken, `{"expected_version":2}`)
	send("POST", "/v1/manual-queue/rev-queued/requeue", moderatorToken, `{"expected_version":9}`)

	for _, body := range []string{"", "{", `{}`, `{"filter":{},"items":[{"review_id":"rev-queued"}]}`,
		`{"filter":{"claimed_by":"mona"}}`, `{"filter":{"content_class":"podcast"}}`} {
		send("POST", "/v1/manual-queue/bulk/requeue", moderatorToken, body)
	}
	send("POST", "/v1/manual-queue/bulk/requeue", moderatorToken, `{"filter":{},"dry_run":true}`)
	send("POST", "/v1/manual-queue/bulk/release", moderatorToken, `{"filter":{"claimed_by":"mona"},"dry_run":true}`)
	send("POST", "/v1/manual-queue/bulk/release", moderatorToken, `{"items":[{"review_id":"rev-queued"},{"review_id":"rev-unknown"},{"review_id":"rev-pending"}]}`)
	send("POST", "/v1/manual-queue/rev-queued/requeue", moderatorToken, `{"expected_version":1,"note":"try again"}`)
	send("POST", "/v1/manual-queue/bulk/requeue", moderatorToken, `{"filter":{"content_class":"publishing_rule"},"note":"all of them"}`)
	send("POST", "/v1/manual-queue/bulk/requeue", moderatorToken, `{"items":[{"review_id":"rev-queued","expected_version":2}]}`)
	get("/v1/reviews/rev-queued", moderatorToken)
	get("/v1/reviews/rev-queued/timeline", moderatorToken)
	get("/v1/manual-queue", moderatorToken)

	t.Logf("%d requests to each", len(reqs))
	fakeHandler := fake.Handler()
	for _, r := range reqs {
		name := r.method + " " + r.path
		if r.token != "" {
			name += " as " + tokenName(r.token)
		}
		if r.body != "" {
			name += " with " + r.body
		}
		want := h.do(r.method, r.path, r.token, r.body)
		got := doFake(fakeHandler, r.method, r.path, r.token, r.body)
		if d := answerDiff(want, got); d != "" {
			t.Errorf("%s: %s\nserver %d %s\nfake   %d %s", name, d, want.Code, strings.TrimSpace(want.Body.String()), got.Code, strings.TrimSpace(got.Body.String()))
		}
		if want.Code == http.StatusOK {
			h.catchUp() // what the server changed reaches the read models
		}
	}
}

func tokenName(secret string) string {
	for _, tok := range testTokens {
		if tok.Secret == secret {
			return tok.Name + " (" + string(tok.Role) + ")"
		}
	}
	return "an unknown token"
}

// doFake sends a request to the fake as harness.do sends it to the server.
func doFake(fake http.Handler, method, path, token, body string) *httptest.ResponseRecorder {
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, r)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := httptest.NewRecorder()
	fake.ServeHTTP(rec, req)
	return rec
}

// answerDiff names the first difference between the server's answer and
// the fake's, or is "" when they agree: status, media type, and the body:
// of application/json its shape, of problem+json its type, status and
// field (the other members, title, detail, instance, request_id, are
// words and IDs the page shows as they come).
func answerDiff(server, fake *httptest.ResponseRecorder) string {
	if server.Code != fake.Code {
		return fmt.Sprintf("status %d, the fake answers %d", server.Code, fake.Code)
	}
	rt, _, _ := mime.ParseMediaType(server.Header().Get("Content-Type"))
	ft, _, _ := mime.ParseMediaType(fake.Header().Get("Content-Type"))
	if rt != ft {
		return fmt.Sprintf("Content-Type %q, the fake answers %q", rt, ft)
	}
	if rt != "application/json" && rt != MIMEProblem {
		return ""
	}
	var rv, fv any
	if err := json.Unmarshal(server.Body.Bytes(), &rv); err != nil {
		return "the server's body is not JSON: " + err.Error()
	}
	if err := json.Unmarshal(fake.Body.Bytes(), &fv); err != nil {
		return "the fake's body is not JSON: " + err.Error()
	}
	if rt == MIMEProblem {
		rp, rok := rv.(map[string]any)
		fp, fok := fv.(map[string]any)
		if !rok || !fok {
			return shapeDiff("$", rv, fv)
		}
		for _, k := range []string{"type", "status", "field"} {
			if fmt.Sprint(rp[k]) != fmt.Sprint(fp[k]) {
				return fmt.Sprintf("problem %s %v, the fake's %v", k, rp[k], fp[k])
			}
		}
		return ""
	}
	return shapeDiff("$", rv, fv)
}

// byReviewID returns the elements of a list of reviews (objects with a
// review_id) by their ID, nil for another array: the server and the fake
// may order them differently.
func byReviewID(a []any) map[string]any {
	out := map[string]any{}
	for _, e := range a {
		o, _ := e.(map[string]any)
		id, ok := o["review_id"].(string)
		if !ok {
			return nil
		}
		out[id] = e
	}
	return out
}

// contractContents is the content submitted per review ID.
type contractContents map[string][]byte

func (c contractContents) Content(_ context.Context, id string) (string, []byte, string, error) {
	b, ok := c[id]
	if !ok {
		return "", nil, "", domain.ErrReviewNotFound
	}
	return "text/plain", b, engine.Digest(b), nil
}

// nullable are the members that are null or not by the figures: a ratio
// without reviews (or attempts, or comparisons) to compute it from.
var nullable = map[string]bool{
	"$.points[].within_budget_ratio":                    true,
	"$.points[].burn_rate":                              true,
	"$.providers[].points[].within_budget_ratio":        true,
	"$.providers[].points[].shadow_within_budget_ratio": true,
	"$.providers[].points[].agreement_ratio":            true,
}

var index = regexp.MustCompile(`\[[0-9]+\]`)

// jsonKind is the kind of a decoded JSON value.
func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "bool"
	case float64:
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

// shapeDiff names the first place where two decoded JSON values differ in
// shape: a kind (null, bool, number, string, array, object), an object key
// one side lacks, recursively; of two non-empty arrays the elements both
// have are compared in turn (of lists of reviews, the elements of the
// same review_id). Values are not compared, and null matches
// any kind at the paths of nullable.
func shapeDiff(path string, server, fake any) string {
	if rk, fk := jsonKind(server), jsonKind(fake); rk != fk && !((rk == "null" || fk == "null") && nullable[index.ReplaceAllString(path, "[]")]) {
		return fmt.Sprintf("%s is %s, in the fake %s", path, rk, fk)
	}
	switch r := server.(type) {
	case map[string]any:
		f := fake.(map[string]any)
		var names []string
		for k := range r {
			names = append(names, k)
		}
		for k := range f {
			if _, ok := r[k]; !ok {
				names = append(names, k)
			}
		}
		slices.Sort(names)
		for _, k := range names {
			rv, rok := r[k]
			fv, fok := f[k]
			switch {
			case !fok:
				return fmt.Sprintf("%s.%s is missing from the fake", path, k)
			case !rok:
				return fmt.Sprintf("%s.%s is only in the fake", path, k)
			}
			if d := shapeDiff(path+"."+k, rv, fv); d != "" {
				return d
			}
		}
	case []any:
		f := fake.([]any)
		if rs, fs := byReviewID(r), byReviewID(f); rs != nil && fs != nil {
			for _, id := range slices.Sorted(maps.Keys(rs)) {
				if fe, ok := fs[id]; ok {
					if d := shapeDiff(fmt.Sprintf("%s[review_id=%s]", path, id), rs[id], fe); d != "" {
						return d
					}
				}
			}
			return ""
		}
		for i := range min(len(r), len(f)) {
			if d := shapeDiff(fmt.Sprintf("%s[%d]", path, i), r[i], f[i]); d != "" {
				return d
			}
		}
	}
	return ""
}
