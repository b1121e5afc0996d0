package httpapi

import (
	"net/http"
	"strings"
	"testing"

	"github.com/reviewledger/reviewledger/api/ui"
)

// TestUIErrorsAreProblems: the UI's own refusals reach the client as
// problem+json with the UI's security headers, like every other error.
func TestUIErrorsAreProblems(t *testing.T) {
	h := newHarness(t, func(_ *Config, d *Deps) { d.UI = ui.Handler() })
	cases := []struct {
		method, path string
		status       int
		kind, detail string
		byUI         bool // answered by the UI handler, not Echo's router
	}{
		{"GET", "/ui/", http.StatusNotFound, "route-not-found", "no route for GET /ui/", true},
		{"GET", "/ui/nope.js", http.StatusNotFound, "route-not-found", "no route for GET /ui/nope.js", true},
		{"GET", "/ui/index.html", http.StatusNotFound, "route-not-found", "no route for GET /ui/index.html", true},
		{"GET", "/ui", http.StatusNotFound, "route-not-found", "no route for GET /ui", false},
		{"POST", "/", http.StatusMethodNotAllowed, "method-not-allowed", "method POST is not allowed on /", false},
		{"DELETE", "/ui/app.js", http.StatusMethodNotAllowed, "method-not-allowed", "method DELETE is not allowed on /ui/app.js", false},
	}
	for _, tc := range cases {
		rec := h.do(tc.method, tc.path, "", "")
		p := wantProblem(t, rec, tc.status, tc.kind, "")
		if p.Detail != tc.detail {
			t.Errorf("%s %s: detail %q, want %q", tc.method, tc.path, p.Detail, tc.detail)
		}
		if strings.Contains(rec.Body.String(), "page not found") {
			t.Errorf("%s %s: the text/plain answer leaked into the body: %q", tc.method, tc.path, rec.Body)
		}
		if tc.byUI {
			if got := rec.Header().Get("Content-Security-Policy"); got != ui.ContentSecurityPolicy {
				t.Errorf("%s %s: Content-Security-Policy %q", tc.method, tc.path, got)
			}
		}
	}
	rec := h.do("GET", "/ui/app.js", "", "")
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Security-Policy") != ui.ContentSecurityPolicy ||
		!strings.Contains(rec.Body.String(), "'use strict'") {
		t.Fatalf("GET /ui/app.js: %d %s", rec.Code, rec.Header())
	}
	etag := rec.Header().Get("ETag")
	if rec := h.do("GET", "/ui/app.js", "", "", "If-None-Match", etag); rec.Code != http.StatusNotModified {
		t.Fatalf("revalidation: %d, want 304", rec.Code)
	}
}

// TestHeadLikeGet: HEAD on the public GET routes answers GET's status and
// headers without a body.
func TestHeadLikeGet(t *testing.T) {
	h := newHarness(t, func(_ *Config, d *Deps) { d.UI = ui.Handler() })
	for _, path := range []string{"/", "/ui/app.js", "/ui/app.css", "/metrics", "/openapi.json", "/healthz"} {
		get := h.do("GET", path, "", "")
		head := h.do("HEAD", path, "", "")
		if get.Code != http.StatusOK || head.Code != http.StatusOK {
			t.Errorf("%s: GET %d, HEAD %d, want 200", path, get.Code, head.Code)
			continue
		}
		if head.Body.Len() != 0 {
			t.Errorf("HEAD %s: %d body bytes", path, head.Body.Len())
		}
		for _, k := range []string{"Content-Type", "Content-Security-Policy", "ETag"} {
			if g, hd := get.Header().Get(k), head.Header().Get(k); g != hd {
				t.Errorf("%s: %s is %q on GET, %q on HEAD", path, k, g, hd)
			}
		}
	}
	if rec := h.do("HEAD", "/ui/nope.js", "", ""); rec.Code != http.StatusNotFound || rec.Header().Get("Content-Type") != MIMEProblem || rec.Body.Len() != 0 {
		t.Errorf("HEAD /ui/nope.js: %d %q, %d body bytes", rec.Code, rec.Header().Get("Content-Type"), rec.Body.Len())
	}
}
