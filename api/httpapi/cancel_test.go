package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

// waitingLedger's Load waits for the request's context to end, as a
// database query does, and returns its error wrapped.
type waitingLedger struct{ Ledger }

func (waitingLedger) Load(ctx context.Context, id string) (*ledger.Snapshot, error) {
	<-ctx.Done()
	return nil, fmt.Errorf("load review-%s: %w", id, ctx.Err())
}

// TestClientCancelIsNotAServerError: a client that goes away is logged at
// INFO with the request ID and counted as 499, never as a failed request
// or a 500.
func TestClientCancelIsNotAServerError(t *testing.T) {
	h := newHarness(t, func(_ *Config, d *Deps) { d.Ledger = waitingLedger{} })
	ctx, cancel := context.WithCancel(context.Background())
	req := httptest.NewRequest("GET", "/v1/reviews/r1", nil).WithContext(ctx)
	req.Header.Set("Authorization", "Bearer "+submitterToken)
	req.Header.Set("X-Request-Id", "gone-0001")
	done := make(chan *httptest.ResponseRecorder)
	go func() {
		rec := httptest.NewRecorder()
		h.srv.Handler().ServeHTTP(rec, req)
		done <- rec
	}()
	cancel()
	rec := <-done
	if rec.Code != StatusClientClosedRequest {
		t.Errorf("status %d, want %d", rec.Code, StatusClientClosedRequest)
	}
	logs := h.logs.String()
	if strings.Contains(logs, `"level":"ERROR"`) || strings.Contains(logs, "request failed") {
		t.Errorf("a client's cancel logged as an error:\n%s", logs)
	}
	var found bool
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "request cancelled by the client") {
			found = strings.Contains(line, `"level":"INFO"`) && strings.Contains(line, `"request_id":"gone-0001"`) &&
				strings.Contains(line, "context canceled")
		}
	}
	if !found {
		t.Errorf("no INFO line with the request ID and the cause:\n%s", logs)
	}
	metrics := h.do("GET", "/metrics", "", "").Body.String()
	if !strings.Contains(metrics, `reviewledger_http_requests_total{code="499",method="GET",route="/v1/reviews/:id"} 1`) ||
		strings.Contains(metrics, `code="500"`) {
		t.Errorf("metrics:\n%s", metrics)
	}

	// The same error while the client is still there is a server fault.
	short, stop := context.WithCancel(context.Background())
	stop()
	h2 := newHarness(t, func(_ *Config, d *Deps) { d.Ledger = ctxLedger{ctx: short} })
	wantProblem(t, h2.do("GET", "/v1/reviews/r1", submitterToken, ""), http.StatusInternalServerError, "internal", "")
	if !strings.Contains(h2.logs.String(), "request failed") {
		t.Errorf("an internal cancellation was not logged as a failure:\n%s", h2.logs)
	}
}

// ctxLedger fails with the error of a context other than the request's.
type ctxLedger struct {
	Ledger
	ctx context.Context
}

func (l ctxLedger) Load(context.Context, string) (*ledger.Snapshot, error) {
	return nil, fmt.Errorf("load: %w", l.ctx.Err())
}

// TestReadinessProbeHangingUp: checks failing because the prober went away
// are no readiness failure and no warning.
func TestReadinessProbeHangingUp(t *testing.T) {
	h := newHarness(t, func(_ *Config, d *Deps) {
		d.Ready = []Check{{Name: "database", Check: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }}}
	})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rec := httptest.NewRecorder()
	h.srv.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil).WithContext(ctx))
	if rec.Code != StatusClientClosedRequest {
		t.Errorf("status %d, want %d", rec.Code, StatusClientClosedRequest)
	}
	if logs := h.logs.String(); strings.Contains(logs, "not ready") || strings.Contains(logs, `"level":"ERROR"`) {
		t.Errorf("logs:\n%s", logs)
	}
}
