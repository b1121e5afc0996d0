package httpapi

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/api/notify"
)

// newDeliveriesHarness is a harness whose admin routes read the
// deliveries of its database, holding three: one delivered, one retrying
// after a 503, one given up.
func newDeliveriesHarness(t *testing.T) *harness {
	t.Helper()
	h := newDBHarness(t)
	h.srv.deps.Deliveries = notify.NewDB(h.pool)
	_, err := h.pool.Exec(context.Background(), `INSERT INTO notify_delivery
		(id, review_id, revision, event_type, body, state, attempts, created_at, retry_since, next_attempt_at, last_attempt_at, last_status, last_error, delivered_at) VALUES
		('d1', 'r1', 2, 'review.decided', '{}', 'delivered', 1, $1, $1, $1, $1, 200, NULL, $1),
		('d2', 'r2', 3, 'review.manual_review', '{}', 'pending', 2, $2, $2, $3, $2, 503, 'HTTP 503: busy', NULL),
		('d3', 'r3', 2, 'review.decided', '{}', 'failed', 9, $2, $2, $2, $2, NULL, 'connection refused', NULL)`,
		t0.Add(-3*time.Hour), t0.Add(-2*time.Hour), t0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestListDeliveries(t *testing.T) {
	t.Parallel()
	h := newDeliveriesHarness(t)
	list := func(query string) []notify.Delivery {
		t.Helper()
		rec := h.do("GET", "/v1/admin/deliveries"+query, adminToken, "")
		if rec.Code != http.StatusOK {
			t.Fatalf("%s: %d %s", query, rec.Code, rec.Body)
		}
		return decode[deliveriesView](t, rec).Deliveries
	}
	ids := func(ds []notify.Delivery) (out []string) {
		for _, d := range ds {
			out = append(out, d.ID+":"+d.State)
		}
		return out
	}
	for query, want := range map[string][]string{
		"":                       {"d1:delivered", "d2:retrying", "d3:failed"},
		"?state=failing":         {"d2:retrying", "d3:failed"},
		"?state=retrying":        {"d2:retrying"},
		"?state=failed":          {"d3:failed"},
		"?state=delivered":       {"d1:delivered"},
		"?state=pending":         nil,
		"?review_id=r3":          {"d3:failed"},
		"?limit=1":               {"d1:delivered"},
		"?state=failing&limit=1": {"d2:retrying"},
	} {
		if got := ids(list(query)); !slices.Equal(got, want) {
			t.Errorf("%q: %v, want %v", query, got, want)
		}
	}
	d := list("?state=retrying")[0]
	if d.LastError == nil || *d.LastError != "HTTP 503: busy" || d.LastStatus == nil || *d.LastStatus != 503 || d.NextAttemptAt == nil || d.Version != 3 {
		t.Errorf("retrying delivery %+v", d)
	}
	rec := h.do("GET", "/v1/admin/deliveries?state=failing", adminToken, "")
	wantKeys(t, keys(t, rec.Body.Bytes()), "deliveries")
	if rec := h.do("GET", "/v1/admin/deliveries?state=pending", adminToken, ""); rec.Body.String() != `{"deliveries":[]}`+"\n" {
		t.Errorf("an empty list: %s", rec.Body)
	}
	for query, field := range map[string]string{
		"?state=broken":    "state",
		"?limit=0":         "limit",
		"?limit=1001":      "limit",
		"?limit=x":         "limit",
		"?review_id=a%20b": "review_id",
	} {
		wantProblem(t, h.do("GET", "/v1/admin/deliveries"+query, adminToken, ""), http.StatusBadRequest, "invalid-request", field)
	}
	wantProblem(t, h.do("GET", "/v1/admin/deliveries", moderatorToken, ""), http.StatusForbidden, "forbidden", "")
	wantProblem(t, h.do("GET", "/v1/admin/deliveries", "", ""), http.StatusUnauthorized, "unauthenticated", "")
}

func TestRedeliver(t *testing.T) {
	t.Parallel()
	h := newDeliveriesHarness(t)
	rec := h.do("POST", "/v1/admin/deliveries/d3/redeliver", adminToken, "")
	if rec.Code != http.StatusOK {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	d := decode[notify.Delivery](t, rec)
	if d.ID != "d3" || d.State != notify.StateRetrying || d.NextAttemptAt == nil || !d.NextAttemptAt.Equal(t0) {
		t.Errorf("redelivered: %+v", d)
	}
	var since time.Time
	if err := h.pool.QueryRow(context.Background(), `SELECT retry_since FROM notify_delivery WHERE id = 'd3'`).Scan(&since); err != nil || !since.Equal(t0) {
		t.Errorf("retry window from %s (%v), want a new one from %s", since, err, t0)
	}
	// A delivered one is sent again.
	rec = h.do("POST", "/v1/admin/deliveries/d1/redeliver", adminToken, "")
	if d := decode[notify.Delivery](t, rec); rec.Code != http.StatusOK || d.State != notify.StateRetrying || d.DeliveredAt != nil {
		t.Errorf("redelivered a delivered one: %d %+v", rec.Code, d)
	}
	wantProblem(t, h.do("POST", "/v1/admin/deliveries/nope/redeliver", adminToken, ""), http.StatusNotFound, "delivery-not-found", "")
	wantProblem(t, h.do("POST", "/v1/admin/deliveries/d3/redeliver", submitterToken, ""), http.StatusForbidden, "forbidden", "")
}

// Without a database of deliveries the routes answer 503.
func TestDeliveriesNotConfigured(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	wantProblem(t, h.do("GET", "/v1/admin/deliveries", adminToken, ""), http.StatusServiceUnavailable, "not-ready", "")
	wantProblem(t, h.do("POST", "/v1/admin/deliveries/d1/redeliver", adminToken, ""), http.StatusServiceUnavailable, "not-ready", "")
}
