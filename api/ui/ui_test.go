package ui

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// served is an answer of the handler, read whole.
type served struct {
	StatusCode int
	Header     http.Header
	Body       []byte
}

func serve(t *testing.T, method, target string, hdr http.Header) served {
	t.Helper()
	r := httptest.NewRequest(method, target, nil)
	for k, v := range hdr {
		r.Header[k] = v
	}
	w := httptest.NewRecorder()
	Handler().ServeHTTP(w, r)
	res := w.Result()
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return served{StatusCode: res.StatusCode, Header: res.Header, Body: body}
}

func TestHandlerServesPageAndAssets(t *testing.T) {
	t.Parallel()
	cases := []struct {
		path, contentType, contains string
	}{
		{"/", "text/html; charset=utf-8", "<title>reviewledger</title>"},
		{"/ui/app.js", "text/javascript; charset=utf-8", "'use strict';"},
		{"/ui/charts.js", "text/javascript; charset=utf-8", "'use strict';"},
		{"/ui/app.css", "text/css; charset=utf-8", ":root"},
		{"/ui/favicon.svg", "image/svg+xml", "<svg"},
	}
	for _, tc := range cases {
		t.Run(tc.path, func(t *testing.T) {
			t.Parallel()
			res := serve(t, http.MethodGet, tc.path, nil)
			body := res.Body
			if res.StatusCode != http.StatusOK {
				t.Fatalf("status %d, want 200", res.StatusCode)
			}
			if got := res.Header.Get("Content-Type"); got != tc.contentType {
				t.Errorf("Content-Type %q, want %q", got, tc.contentType)
			}
			if !strings.Contains(string(body), tc.contains) {
				t.Errorf("body lacks %q", tc.contains)
			}
			wantHeaders := map[string]string{
				"Content-Security-Policy": ContentSecurityPolicy,
				"X-Content-Type-Options":  "nosniff",
				"Cache-Control":           "no-cache",
				"Referrer-Policy":         "no-referrer",
				"X-Frame-Options":         "DENY",
			}
			for k, v := range wantHeaders {
				if got := res.Header.Get(k); got != v {
					t.Errorf("%s %q, want %q", k, got, v)
				}
			}
			if !strings.HasPrefix(ContentSecurityPolicy, "default-src 'self'") {
				t.Errorf("CSP %q does not start with default-src 'self'", ContentSecurityPolicy)
			}
			if res.Header.Get("ETag") == "" {
				t.Error("no ETag")
			}
		})
	}
}

func TestHandlerRevalidatesWithETag(t *testing.T) {
	t.Parallel()
	first := serve(t, http.MethodGet, "/ui/app.js", nil)
	etag := first.Header.Get("ETag")
	again := serve(t, http.MethodGet, "/ui/app.js", http.Header{"If-None-Match": {etag}})
	if again.StatusCode != http.StatusNotModified {
		t.Fatalf("status %d with If-None-Match %s, want 304", again.StatusCode, etag)
	}
	other := serve(t, http.MethodGet, "/ui/app.css", nil).Header.Get("ETag")
	if other == etag {
		t.Fatalf("app.css and app.js share ETag %s", etag)
	}
}

func TestHandlerHead(t *testing.T) {
	t.Parallel()
	res := serve(t, http.MethodHead, "/", nil)
	body := res.Body
	if res.StatusCode != http.StatusOK || len(body) != 0 {
		t.Fatalf("HEAD /: status %d, %d body bytes; want 200 and none", res.StatusCode, len(body))
	}
}

func TestHandlerRefusesOtherPathsAndMethods(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, method, path string
		status             int
	}{
		{"unknown asset", http.MethodGet, "/ui/nope.js", http.StatusNotFound},
		{"asset directory", http.MethodGet, "/ui/", http.StatusNotFound},
		{"index by name", http.MethodGet, "/ui/index.html", http.StatusNotFound},
		{"path outside", http.MethodGet, "/index.html", http.StatusNotFound},
		{"traversal", http.MethodGet, "/ui/../ui.go", http.StatusNotFound},
		{"api path", http.MethodGet, "/v1/reviews", http.StatusNotFound},
		{"post page", http.MethodPost, "/", http.StatusMethodNotAllowed},
		{"delete asset", http.MethodDelete, "/ui/app.js", http.StatusMethodNotAllowed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := serve(t, tc.method, tc.path, nil)
			if res.StatusCode != tc.status {
				t.Fatalf("%s %s: status %d, want %d", tc.method, tc.path, res.StatusCode, tc.status)
			}
			if res.Header.Get("Content-Security-Policy") == "" {
				t.Error("error answer without Content-Security-Policy")
			}
			if tc.status == http.StatusMethodNotAllowed && res.Header.Get("Allow") != "GET, HEAD" {
				t.Errorf("Allow %q, want GET, HEAD", res.Header.Get("Allow"))
			}
		})
	}
}

// TestPageIsCSPAndEscapeSafe guards the rules the page relies on: nothing
// inline that default-src 'self' would block, and no API that parses data
// as markup.
func TestPageIsCSPAndEscapeSafe(t *testing.T) {
	t.Parallel()
	html := string(assets()[indexFile].body)
	js := string(assets()["app.js"].body)

	htmlForbidden := map[string]*regexp.Regexp{
		"inline event handler attribute": regexp.MustCompile(`(?i)\son[a-z]+\s*=`),
		"inline style attribute":         regexp.MustCompile(`(?i)\sstyle\s*=`),
		"style element":                  regexp.MustCompile(`(?i)<style`),
		"inline script":                  regexp.MustCompile(`(?i)<script(\s[^>]*)?>[^<\s]`),
		"javascript: URL":                regexp.MustCompile(`(?i)javascript:`),
		"external resource":              regexp.MustCompile(`(?i)(src|href)\s*=\s*"(https?:)?//`),
	}
	for what, re := range htmlForbidden {
		if m := re.FindString(html); m != "" {
			t.Errorf("index.html has %s: %q", what, m)
		}
	}
	for _, tag := range regexp.MustCompile(`(?i)<script[^>]*>`).FindAllString(html, -1) {
		if !strings.Contains(tag, ` src="/ui/`) {
			t.Errorf("index.html has a script that is not loaded from %s: %s", Prefix, tag)
		}
	}
	jsForbidden := []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "localStorage"}
	for name, js := range map[string]string{"app.js": js, "charts.js": string(assets()["charts.js"].body)} {
		if js == "" {
			t.Errorf("%s is not embedded", name)
		}
		for _, s := range jsForbidden {
			if strings.Contains(js, s) {
				t.Errorf("%s uses %s", name, s)
			}
		}
	}
	for _, m := range regexp.MustCompile(`(?:src|href)="(/ui/[^"]+)"`).FindAllStringSubmatch(html, -1) {
		if res := serve(t, http.MethodGet, m[1], nil); res.StatusCode != http.StatusOK {
			t.Errorf("index.html refers to %s, which answers %d", m[1], res.StatusCode)
		}
	}
}
