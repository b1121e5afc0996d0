package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/reviewledger/reviewledger/api/engine"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

// TestContent serves a review's content on the real runner and
// PostgreSQL: the role table, headers, digest, not found, purged and a
// stored payload that is not what the ledger recorded.
func TestContent(t *testing.T) {
	w := newWithRunner(t)
	ctx := context.Background()
	text := "WEBVTT\n\n00:01.000 --> 00:02.000\n<script>alert(1)</script>"
	body := `{"review_id":"ct-1","content_class":"caption_suggestion","content_type":"text/vtt; charset=utf-8","content":` + jsonString(text) + `}`
	if rec := w.do("POST", "/v1/reviews", submitterToken, body); rec.Code != http.StatusAccepted {
		t.Fatalf("submit: %d %s", rec.Code, rec.Body)
	}
	rv, err := w.ledger.Load(ctx, "ct-1")
	if err != nil {
		t.Fatal(err)
	}
	reads := func(role, outcome string) float64 {
		return testutil.ToFloat64(w.srv.metrics.content.WithLabelValues(role, outcome))
	}

	for _, tc := range []struct {
		name, token string
		status      int
		kind        string
	}{
		{"moderator", moderatorToken, http.StatusOK, ""},
		{"admin", adminToken, http.StatusOK, ""},
		{"submitter", submitterToken, http.StatusForbidden, "forbidden"},
		{"auditor", auditorToken, http.StatusForbidden, "forbidden"},
		{"no token", "", http.StatusUnauthorized, "unauthenticated"},
		{"unknown token", "not-a-token-of-ours", http.StatusUnauthorized, "unauthenticated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := w.do("GET", "/v1/reviews/ct-1/content", tc.token, "")
			if tc.status != http.StatusOK {
				wantProblem(t, rec, tc.status, tc.kind, "")
				return
			}
			if rec.Code != http.StatusOK || rec.Body.String() != text {
				t.Fatalf("%d %q", rec.Code, rec.Body)
			}
			for k, v := range map[string]string{
				"Content-Type":           "text/vtt; charset=utf-8",
				"Content-Disposition":    "inline",
				"Cache-Control":          "no-store",
				"X-Content-Type-Options": "nosniff",
				HeaderPayloadDigest:      rv.PayloadDigest(),
				"Repr-Digest":            mustReprDigest(t, rv.PayloadDigest()),
			} {
				if got := rec.Header().Get(k); got != v {
					t.Errorf("%s: %q, want %q", k, got, v)
				}
			}
			if !strings.Contains(rec.Header().Get("Content-Security-Policy"), "sandbox") {
				t.Errorf("Content-Security-Policy %q", rec.Header().Get("Content-Security-Policy"))
			}
		})
	}
	if reads("moderator", "served") != 1 || reads("admin", "served") != 1 {
		t.Errorf("served reads: moderator %v, admin %v", reads("moderator", "served"), reads("admin", "served"))
	}
	logs := w.logs.String()
	if strings.Contains(logs, "alert(1)") || strings.Contains(logs, "WEBVTT") {
		t.Errorf("logs hold the content: %s", logs)
	}
	if !strings.Contains(logs, `"msg":"review content read","request_id"`) || !strings.Contains(logs, `"actor":"mona","role":"moderator","review_id":"ct-1","outcome":"served"`) {
		t.Errorf("no access record in the logs: %s", logs)
	}

	wantProblem(t, w.do("GET", "/v1/reviews/nope/content", moderatorToken, ""), http.StatusNotFound, "review-not-found", "")
	wantProblem(t, w.do("GET", "/v1/reviews/has%20space/content", moderatorToken, ""), http.StatusBadRequest, "invalid-review-id", "review_id")

	// Stored bytes that are not the reviewed ones are never served.
	pool := w.pool
	if _, err := pool.Exec(ctx, `UPDATE review_payload SET content = 'something else' WHERE review_id = 'ct-1'`); err != nil {
		t.Fatal(err)
	}
	rec := w.do("GET", "/v1/reviews/ct-1/content", moderatorToken, "", "X-Request-Id", "mismatch-1")
	p := wantProblem(t, rec, http.StatusInternalServerError, "internal", "")
	if strings.Contains(rec.Body.String(), "something else") || strings.Contains(rec.Body.String(), "sha256") {
		t.Errorf("500 body leaks: %s", rec.Body)
	}
	if p.RequestID != "mismatch-1" || !strings.Contains(w.logs.String(), `"request_id":"mismatch-1"`) ||
		!strings.Contains(w.logs.String(), engine.ErrContentMismatch.Error()) || reads("moderator", "mismatch") != 1 {
		t.Errorf("mismatch not logged with its request ID: %s", w.logs)
	}

	// Purged by retention: the review is still there, its content is gone.
	if _, err := pool.Exec(ctx, `DELETE FROM review_payload WHERE review_id = 'ct-1'`); err != nil {
		t.Fatal(err)
	}
	wantProblem(t, w.do("GET", "/v1/reviews/ct-1/content", moderatorToken, ""), http.StatusGone, "content-purged", "")
	if reads("moderator", "purged") != 1 {
		t.Errorf("purged reads %v", reads("moderator", "purged"))
	}
}

// TestContentTypes: other media types are downloads; a content type that
// is no type/subtype is served as application/octet-stream.
func TestContentTypes(t *testing.T) {
	w := newWithRunner(t)
	ctx := context.Background()
	for _, tc := range []struct {
		id, contentType, served, disposition string
	}{
		{"png", "image/png", "image/png", `attachment; filename="png.bin"`},
		{"json", "application/json", "application/json", `attachment; filename="json.bin"`},
		{"html", "TEXT/HTML", "text/html", "inline"},
		{"bare", "plain", "application/octet-stream", `attachment; filename="bare.bin"`},
		{"a:b", "text/plain; charset=utf-8", "text/plain; charset=utf-8", "inline"},
	} {
		content := []byte{0x89, 'P', 'N', 'G', 0, 1, 2}
		if _, _, err := w.svc.Submit(ctx, engine.SubmitRequest{ReviewID: tc.id, ContentClass: "caption_suggestion", ContentType: tc.contentType, Content: content, Actor: ledger.Actor{Name: "platform"}}); err != nil {
			t.Fatal(err)
		}
		rec := w.do("GET", "/v1/reviews/"+tc.id+"/content", moderatorToken, "")
		if rec.Code != http.StatusOK || rec.Body.String() != string(content) {
			t.Fatalf("%s: %d %q", tc.id, rec.Code, rec.Body)
		}
		if got := rec.Header().Get("Content-Type"); got != tc.served {
			t.Errorf("%s: Content-Type %q, want %q", tc.id, got, tc.served)
		}
		if got := rec.Header().Get("Content-Disposition"); got != tc.disposition {
			t.Errorf("%s: Content-Disposition %q, want %q", tc.id, got, tc.disposition)
		}
	}
}

// TestContentNotConfigured: without a content store the route answers
// 503, as other routes do without their dependency.
func TestContentNotConfigured(t *testing.T) {
	h := newHarness(t)
	h.submit("r1", "caption_suggestion", "x")
	wantProblem(t, h.do("GET", "/v1/reviews/r1/content", moderatorToken, ""), http.StatusServiceUnavailable, "not-ready", "")
	wantProblem(t, h.do("GET", "/v1/reviews/r1/content", auditorToken, ""), http.StatusForbidden, "forbidden", "")
}

func mustReprDigest(t *testing.T, digest string) string {
	t.Helper()
	v, ok := reprDigest(digest)
	if !ok {
		t.Fatalf("digest %q", digest)
	}
	return v
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
