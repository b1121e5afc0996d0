package main

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
)

// TestE2EAdmission: with REVIEWLEDGER_MAX_IN_FLIGHT reached, a new review
// is answered 429 with Retry-After and not stored; the same review again is
// let through; once the reviews in flight leave pending, new work is taken.
func TestE2EAdmission(t *testing.T) {
	t.Parallel()
	srv := newE2EServer(t, map[string]string{"REVIEWLEDGER_MAX_IN_FLIGHT": "2"})
	for _, id := range []string{"e2e-admit-1", "e2e-admit-2"} {
		srv.Provider.script(id, hang())
		srv.submit(t, id, "e2e_fast", content(id))
	}
	res := srv.expect(t, http.StatusTooManyRequests, http.MethodPost, "/v1/reviews", tokSubmitter, submitBody("e2e-admit-3", "e2e_fast", content("three")))
	checkProblem(t, res, http.StatusTooManyRequests)
	if s, err := strconv.Atoi(res.Header.Get("Retry-After")); err != nil || s < 1 {
		t.Errorf("429 with Retry-After %q, want whole seconds", res.Header.Get("Retry-After"))
	}
	srv.expectProblem(t, http.StatusNotFound, http.MethodGet, "/v1/reviews/e2e-admit-3", tokSubmitter, nil)
	// Submitting one in flight again adds no work.
	srv.expect(t, http.StatusOK, http.MethodPost, "/v1/reviews", tokSubmitter, submitBody("e2e-admit-1", "e2e_fast", content("e2e-admit-1")))

	for _, id := range []string{"e2e-admit-1", "e2e-admit-2"} {
		if got := srv.waitSettled(t, id); got.State != "manual_review" {
			t.Fatalf("%s: %+v, want manual_review", id, got)
		}
	}
	clocktest.EventuallyShows(t, "submissions to be taken again", func() (bool, string) {
		res := srv.call(t, http.MethodPost, "/v1/reviews", tokSubmitter, submitBody("e2e-admit-3", "e2e_fast", content("three")))
		return res.Status == http.StatusAccepted, res.String()
	})
	if got := srv.waitSettled(t, "e2e-admit-3"); got.State != "accepted" {
		t.Errorf("e2e-admit-3: %+v, want accepted", got)
	}
}
