package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

func TestHealthAndReadiness(t *testing.T) {
	lag := 2 * time.Second
	dbErr := errors.New("dial tcp 10.0.0.9:5432: connection refused")
	var ping error
	h := newHarness(t, func(_ *Config, d *Deps) {
		d.Ready = []Check{
			{Name: "database", Check: func(context.Context) error { return ping }},
			{Name: "projections", Check: func(context.Context) error {
				if lag > 5*time.Second {
					return fmt.Errorf("lag %s over 5s", lag)
				}
				return nil
			}},
		}
	})
	if rec := h.do("GET", "/healthz", "", ""); rec.Code != http.StatusOK {
		t.Fatalf("healthz %d", rec.Code)
	}
	rec := h.do("GET", "/readyz", "", "")
	if rec.Code != http.StatusOK || rec.Body.String() != `{"status":"ok","checks":{"database":"ok","projections":"ok"}}`+"\n" {
		t.Fatalf("readyz %d %s", rec.Code, rec.Body)
	}
	lag = 6 * time.Second
	p := wantProblem(t, h.do("GET", "/readyz", "", ""), http.StatusServiceUnavailable, "not-ready", "")
	if !strings.Contains(p.Detail, "projections") || strings.Contains(p.Detail, "database") {
		t.Fatalf("detail %q", p.Detail)
	}
	ping = dbErr
	p = wantProblem(t, h.do("GET", "/readyz", "", ""), http.StatusServiceUnavailable, "not-ready", "")
	if strings.Contains(p.Detail, "10.0.0.9") || !strings.Contains(p.Detail, "database") {
		t.Fatalf("detail %q leaks or misses the cause", p.Detail)
	}
	// /healthz stays 200: the process is alive.
	if rec := h.do("GET", "/healthz", "", ""); rec.Code != http.StatusOK {
		t.Fatalf("healthz %d", rec.Code)
	}
}

func TestMetrics(t *testing.T) {
	h := newHarness(t)
	h.do("GET", "/v1/reviews/nope", submitterToken, "")
	rec := h.do("GET", "/metrics", "", "")
	if rec.Code != http.StatusOK || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/plain") {
		t.Fatalf("%d %s", rec.Code, rec.Header())
	}
	if !strings.Contains(rec.Body.String(), `reviewledger_http_requests_total{code="404",method="GET",route="/v1/reviews/:id"} 1`) {
		t.Fatalf("metrics:\n%s", rec.Body)
	}
}

// failingLedger fails every call with an error that must not leak.
type failingLedger struct{ Ledger }

var errInternal = errors.New(`ERROR: relation "event" does not exist (SQLSTATE 42P01) SELECT data FROM event`)

func (failingLedger) Load(context.Context, string) (*ledger.Snapshot, error) { return nil, errInternal }

func (failingLedger) History(context.Context, string) (*ledger.History, error) {
	panic("history exploded")
}

func (failingLedger) Write(context.Context, *ledger.Snapshot, ledger.Actor, ledger.Step) (*ledger.Snapshot, error) {
	return nil, errInternal
}

func TestUnexpectedErrorsAnswerGeneric500(t *testing.T) {
	h := newHarness(t, func(_ *Config, d *Deps) { d.Ledger = failingLedger{} })
	for _, path := range []string{"/v1/reviews/r1", "/v1/reviews/r1/events"} {
		rec := h.do("GET", path, adminToken, "", "X-Request-Id", "trace-me")
		p := wantProblem(t, rec, http.StatusInternalServerError, "internal", "")
		body := rec.Body.String()
		for _, leak := range []string{"SQLSTATE", "SELECT", "relation", "exploded", "goroutine", ".go:"} {
			if strings.Contains(body, leak) {
				t.Errorf("%s: 500 body leaks %q: %s", path, leak, body)
			}
		}
		if p.RequestID != "trace-me" {
			t.Errorf("request id %q", p.RequestID)
		}
	}
	logs := h.logs.String()
	if !strings.Contains(logs, "trace-me") || !strings.Contains(logs, "SQLSTATE") || !strings.Contains(logs, "history exploded") {
		t.Fatalf("the cause is not logged with the request ID:\n%s", logs)
	}
}

func TestUnknownRoutes(t *testing.T) {
	h := newHarness(t)
	cases := []struct {
		method, path string
		status       int
		kind, detail string
	}{
		{"GET", "/v2/nothing", http.StatusNotFound, "route-not-found", "no route for GET /v2/nothing"},
		{"GET", "/v1/nope", http.StatusNotFound, "route-not-found", "no route for GET /v1/nope"},
		{"DELETE", "/v1/reviews/r1", http.StatusMethodNotAllowed, "method-not-allowed", "method DELETE is not allowed on /v1/reviews/r1"},
		{"POST", "/healthz", http.StatusMethodNotAllowed, "method-not-allowed", "method POST is not allowed on /healthz"},
		{"BREW", "/healthz", http.StatusMethodNotAllowed, "method-not-allowed", "method other is not allowed on /healthz"},
	}
	for _, tc := range cases {
		rec := h.do(tc.method, tc.path, adminToken, "")
		p := wantProblem(t, rec, tc.status, tc.kind, "")
		if p.Detail != tc.detail || p.Instance != tc.path {
			t.Errorf("%s %s: detail %q instance %q, want %q", tc.method, tc.path, p.Detail, p.Instance, tc.detail)
		}
		if strings.Contains(rec.Body.String(), "code=") || strings.Contains(rec.Body.String(), "message=") {
			t.Errorf("%s %s: Echo's error text in the body: %s", tc.method, tc.path, rec.Body)
		}
		if tc.status == http.StatusMethodNotAllowed && rec.Header().Get("Allow") == "" {
			t.Errorf("%s %s: 405 without Allow", tc.method, tc.path)
		}
	}
	long := "/v1/" + strings.Repeat("x", 500)
	if p := wantProblem(t, h.do("GET", long, "", ""), http.StatusNotFound, "route-not-found", ""); len(p.Detail) > 250 {
		t.Errorf("detail quotes %d bytes of the path", len(p.Detail))
	}
	// A request ID that is not plausible is replaced.
	rec := h.do("GET", "/healthz", "", "", "X-Request-Id", "bad id\twith tab")
	if id := rec.Header().Get("X-Request-Id"); id == "" || strings.Contains(id, " ") {
		t.Fatalf("request id %q", id)
	}
}

func TestUIMountedWithoutAuth(t *testing.T) {
	h := newHarness(t, func(_ *Config, d *Deps) {
		d.UI = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			_, _ = w.Write([]byte("<!doctype html><title>queue</title>"))
		})
	})
	rec := h.do("GET", "/", "", "")
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "<title>queue") {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
}
