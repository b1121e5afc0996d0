package httpapi

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/reviewledger/reviewledger/api/engine"
	"github.com/reviewledger/reviewledger/api/engine/provider"
	"github.com/reviewledger/reviewledger/domain"
)

func TestCallback(t *testing.T) {
	h := newHarness(t)
	body := `{"review_id":"r1","attempt":1,"state":"accepted","reasons":[]}`
	rec := h.do("POST", "/v1/reviews/r1/findings", "", body, "webhook-id", "msg_1", "webhook-timestamp", "1764504000", "webhook-signature", "v1,abc")
	if rec.Code != http.StatusOK || rec.Body.String() != `{"review_id":"r1","status":"applied"}`+"\n" {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	got := h.runner.callbacks[0]
	if got.id != "r1" || string(got.body) != body || got.header.Get("webhook-signature") != "v1,abc" || got.header.Get("webhook-id") != "msg_1" {
		t.Fatalf("runner got %+v", got)
	}
	for _, tc := range []struct {
		err    error
		status int
		kind   string
	}{
		{fmt.Errorf("finding for r1: %w", domain.ErrReviewNotFound), http.StatusNotFound, "review-not-found"},
		{fmt.Errorf("late: %w", domain.ErrAttemptNotInFlight), http.StatusConflict, "conflicting-completion"},
		{fmt.Errorf("decided: %w", domain.ErrNotPending), http.StatusConflict, "conflicting-completion"},
		{fmt.Errorf("bad: %w", domain.ErrInvalidFinding), http.StatusUnprocessableEntity, "invalid-finding"},
		{fmt.Errorf("stale: %w", provider.ErrInvalidSignature), http.StatusUnauthorized, "invalid-signature"},
		{fmt.Errorf("late: %w", engine.ErrConflictingCompletion), http.StatusConflict, "conflicting-completion"},
		{fmt.Errorf("copy: %w", engine.ErrDeliveryInProgress), http.StatusServiceUnavailable, "delivery-in-progress"},
	} {
		h.runner.callbackErr = tc.err
		rec := h.do("POST", "/v1/reviews/r1/findings", "", body)
		wantProblem(t, rec, tc.status, tc.kind, "")
		// A copy whose first copy is still being handled is sent again.
		want := ""
		if tc.status == http.StatusServiceUnavailable {
			want = "1"
		}
		if got := rec.Header().Get("Retry-After"); got != want {
			t.Errorf("%s: Retry-After %q, want %q", tc.kind, got, want)
		}
	}
}
