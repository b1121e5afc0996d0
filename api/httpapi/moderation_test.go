package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

func requeueJSON(version uint64, note string) string {
	return fmt.Sprintf(`{"expected_version":%d,"note":%q}`, version, note)
}

// version is a review's version as the ledger has it.
func (h *harness) version(id string) uint64 {
	h.t.Helper()
	rv, err := h.ledger.Load(context.Background(), id)
	if err != nil {
		h.t.Fatal(err)
	}
	return rv.Version()
}

func TestRequeue(t *testing.T) {
	h := newHarness(t)
	h.submit("r1", "caption_suggestion", "x")
	wantProblem(t, h.do("POST", "/v1/manual-queue/r1/requeue", moderatorToken, requeueJSON(0, "")), http.StatusConflict, "not-in-manual-review", "")
	h.escalate("r1", domain.ReasonBudgetExhausted)
	seen := h.version("r1")

	for _, tc := range []struct {
		name, body, kind, field string
	}{
		{"no expected_version", `{"note":"x"}`, "invalid-request", "expected_version"},
		{"malformed", `{`, "invalid-request", "body"},
		{"note too long", requeueJSON(seen, strings.Repeat("n", maxNoteLen+1)), "invalid-request", "note"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantProblem(t, h.do("POST", "/v1/manual-queue/r1/requeue", moderatorToken, tc.body), http.StatusBadRequest, tc.kind, tc.field)
		})
	}
	wantProblem(t, h.do("POST", "/v1/manual-queue/nope/requeue", moderatorToken, requeueJSON(0, "")), http.StatusNotFound, "review-not-found", "")
	wantProblem(t, h.do("POST", "/v1/manual-queue/a%2Fb/requeue", moderatorToken, requeueJSON(0, "")), http.StatusBadRequest, "invalid-review-id", "review_id")
	wantProblem(t, h.do("POST", "/v1/manual-queue/r1/requeue", moderatorToken, requeueJSON(seen-1, "")), http.StatusConflict, "version-moved", "")
	wantProblem(t, h.do("POST", "/v1/manual-queue/r1/requeue", submitterToken, requeueJSON(seen, "")), http.StatusForbidden, "forbidden", "")
	big := newHarness(t, func(c *Config, _ *Deps) { c.MaxBodyBytes = 64 })
	wantProblem(t, big.do("POST", "/v1/manual-queue/r1/requeue", moderatorToken, requeueJSON(0, strings.Repeat("n", 100))), http.StatusRequestEntityTooLarge, "body-too-large", "")

	// Another moderator's live claim refuses it, naming the holder; a
	// claim made after the version seen does not make it stale.
	if rec := h.do("POST", "/v1/manual-queue/r1/claim", moderator2, ""); rec.Code != http.StatusOK {
		t.Fatalf("claim: %d %s", rec.Code, rec.Body)
	}
	p := wantProblem(t, h.do("POST", "/v1/manual-queue/r1/requeue", moderatorToken, requeueJSON(seen, "")), http.StatusConflict, "claimed-by-other", "")
	if p.ClaimedBy != "max" || !contains(p.Detail, "max") {
		t.Fatalf("problem %+v does not name the holder", p)
	}
	rec := h.do("POST", "/v1/manual-queue/r1/requeue", moderator2, requeueJSON(seen, "provider back"))
	if rec.Code != http.StatusOK {
		t.Fatalf("requeue: %d %s", rec.Code, rec.Body)
	}
	v := decode[requeuedView](t, rec)
	if v.State != "pending" || v.Round != 2 || !v.Deadline.Equal(h.now.Add(30*time.Second)) || v.Version != seen+2 {
		t.Fatalf("requeued view %+v", v)
	}
	if len(h.runner.requeued) != 1 || h.runner.requeued[0] != "r1" {
		t.Fatalf("engine asked to requeue %v", h.runner.requeued)
	}
	rv, _ := h.ledger.Load(context.Background(), "r1")
	if rv.Round() != 2 || rv.State() != domain.StatePending {
		t.Fatalf("ledger: round %d state %s", rv.Round(), rv.State())
	}
	// The event records who and why.
	h2, _ := h.ledger.History(context.Background(), "r1")
	last := h2.Events[len(h2.Events)-1]
	if rq, ok := last.Event.(domain.Requeued); !ok || rq.By != "max" || rq.Note != "provider back" || last.Metadata.Actor != "max" {
		t.Fatalf("last event %+v %+v", last.Event, last.Metadata)
	}
	wantProblem(t, h.do("POST", "/v1/manual-queue/r1/requeue", moderatorToken, requeueJSON(v.Version, "")), http.StatusConflict, "not-in-manual-review", "")
}

// reviewsOnly is a Reviews without the Requeuer of the engine.
type reviewsOnly struct{ Reviews }

func TestRequeueWithoutEngine(t *testing.T) {
	h := newHarness(t, func(_ *Config, d *Deps) { d.Reviews = reviewsOnly{d.Reviews} })
	h.submit("r1", "caption_suggestion", "x")
	h.escalate("r1", domain.ReasonBudgetExhausted)
	wantProblem(t, h.do("POST", "/v1/manual-queue/r1/requeue", moderatorToken, requeueJSON(h.version("r1"), "")), http.StatusServiceUnavailable, "not-ready", "")
}

func TestReleaseClaim(t *testing.T) {
	h := newHarness(t)
	h.submit("r1", "caption_suggestion", "x")
	h.submit("pending", "caption_suggestion", "y")
	h.escalate("r1", domain.ReasonBudgetExhausted)
	wantProblem(t, h.do("DELETE", "/v1/manual-queue/r1/claim", moderatorToken, ""), http.StatusConflict, "not-claimed", "")
	if rec := h.do("POST", "/v1/manual-queue/r1/claim", moderatorToken, ""); rec.Code != http.StatusOK {
		t.Fatalf("claim: %d %s", rec.Code, rec.Body)
	}
	p := wantProblem(t, h.do("DELETE", "/v1/manual-queue/r1/claim", moderator2, ""), http.StatusConflict, "claimed-by-other", "")
	if p.ClaimedBy != "mona" {
		t.Fatalf("problem %+v", p)
	}
	rec := h.do("DELETE", "/v1/manual-queue/r1/claim", moderatorToken, "")
	if rec.Code != http.StatusOK {
		t.Fatalf("release: %d %s", rec.Code, rec.Body)
	}
	wantKeys(t, keys(t, rec.Body.Bytes()), "review_id", "released_by", "claimed_by", "version")
	if v := decode[releaseView](t, rec); v.ReleasedBy != "mona" || v.Moderator != "mona" || v.Version != h.version("r1") {
		t.Fatalf("release %+v", v)
	}
	wantProblem(t, h.do("DELETE", "/v1/manual-queue/r1/claim", moderatorToken, ""), http.StatusConflict, "not-claimed", "")
	// An admin releases anyone's claim.
	h.do("POST", "/v1/manual-queue/r1/claim", moderator2, "")
	if rec := h.do("DELETE", "/v1/manual-queue/r1/claim", adminToken, ""); rec.Code != http.StatusOK || decode[releaseView](t, rec).Moderator != "max" {
		t.Fatalf("admin release: %d %s", rec.Code, rec.Body)
	}
	// An expired claim is no claim.
	h.do("POST", "/v1/manual-queue/r1/claim", moderatorToken, "")
	h.now = h.now.Add(11 * time.Minute)
	wantProblem(t, h.do("DELETE", "/v1/manual-queue/r1/claim", moderatorToken, ""), http.StatusConflict, "not-claimed", "")
	wantProblem(t, h.do("DELETE", "/v1/manual-queue/pending/claim", moderatorToken, ""), http.StatusConflict, "not-in-manual-review", "")
	wantProblem(t, h.do("DELETE", "/v1/manual-queue/nope/claim", moderatorToken, ""), http.StatusNotFound, "review-not-found", "")
	wantProblem(t, h.do("DELETE", "/v1/manual-queue/a%2Fb/claim", moderatorToken, ""), http.StatusBadRequest, "invalid-review-id", "review_id")
	wantProblem(t, h.do("DELETE", "/v1/manual-queue/r1/claim", auditorToken, ""), http.StatusForbidden, "forbidden", "")
}

func TestHoldRoutes(t *testing.T) {
	h := newDBHarness(t)
	h.submit("r1", "caption_suggestion", "x")
	h.submit("r2", "caption_suggestion", "y")
	h.escalate("r1", domain.ReasonBudgetExhausted)
	h.escalate("r2", domain.ReasonBudgetExhausted)
	seen := h.version("r1")
	wantProblem(t, h.do("POST", "/v1/manual-queue/r1/hold", moderatorToken, `{}`), http.StatusBadRequest, "invalid-request", "note")
	wantProblem(t, h.do("POST", "/v1/manual-queue/r1/hold", moderatorToken, `{"note":"`+strings.Repeat("n", maxNoteLen+1)+`"}`), http.StatusBadRequest, "invalid-request", "note")
	wantProblem(t, h.do("POST", "/v1/manual-queue/r1/hold", moderatorToken, `{"note":1}`), http.StatusBadRequest, "invalid-request", "note")
	wantProblem(t, h.do("DELETE", "/v1/manual-queue/r1/hold", moderatorToken, ""), http.StatusConflict, "not-held", "")
	wantProblem(t, h.do("POST", "/v1/manual-queue/nope/hold", moderatorToken, `{"note":"x"}`), http.StatusNotFound, "review-not-found", "")

	rec := h.do("POST", "/v1/manual-queue/r1/hold", moderatorToken, fmt.Sprintf(`{"note":"waiting for legal","expected_version":%d}`, seen))
	if rec.Code != http.StatusOK {
		t.Fatalf("hold: %d %s", rec.Code, rec.Body)
	}
	v := decode[holdView](t, rec)
	if !v.Held || *v.HeldBy != "mona" || *v.HoldNote != "waiting for legal" || !v.HeldAt.Equal(h.now) || v.Version != seen+1 {
		t.Fatalf("hold %+v", v)
	}
	wantProblem(t, h.do("POST", "/v1/manual-queue/r1/hold", moderator2, `{"note":"again"}`), http.StatusConflict, "already-held", "")
	h.catchUp()
	// Held items are listed apart with held=false and held=true; the
	// default list, as a client knowing nothing of holds reads it, has
	// every review in manual_review.
	if q := h.do("GET", "/v1/manual-queue", moderatorToken, "").Body.String(); !contains(q, `"r1"`) || !contains(q, `"r2"`) || !contains(q, `"held":true`) {
		t.Fatalf("default list %s", q)
	}
	if q := h.do("GET", "/v1/manual-queue?held=false", moderatorToken, "").Body.String(); contains(q, `"r1"`) || !contains(q, `"r2"`) {
		t.Fatalf("held=false %s", q)
	}
	if q := h.do("GET", "/v1/manual-queue?held=true", moderatorToken, "").Body.String(); !contains(q, `"r1"`) || contains(q, `"r2"`) || !contains(q, `"hold_note":"waiting for legal"`) {
		t.Fatalf("held list %s", q)
	}
	if q := h.do("GET", "/v1/manual-queue?held=any", moderatorToken, "").Body.String(); !contains(q, `"r1"`) || !contains(q, `"r2"`) {
		t.Fatalf("held=any %s", q)
	}
	for _, q := range []string{"held=maybe", "order=random", "order=id"} {
		field, _, _ := strings.Cut(q, "=")
		wantProblem(t, h.do("GET", "/v1/manual-queue?"+q, moderatorToken, ""), http.StatusBadRequest, "invalid-request", field)
	}
	// A decision on the version seen before the hold still applies to
	// r2; another moderator's claim refuses a hold.
	h.do("POST", "/v1/manual-queue/r2/claim", moderator2, "")
	wantProblem(t, h.do("POST", "/v1/manual-queue/r2/hold", moderatorToken, `{"note":"x"}`), http.StatusConflict, "claimed-by-other", "")
	wantProblem(t, h.do("DELETE", "/v1/manual-queue/r1/hold", submitterToken, ""), http.StatusForbidden, "forbidden", "")
	rec = h.do("DELETE", "/v1/manual-queue/r1/hold", moderator2, "")
	if rec.Code != http.StatusOK {
		t.Fatalf("unhold: %d %s", rec.Code, rec.Body)
	}
	if v := decode[holdView](t, rec); v.Held || v.HeldBy != nil || v.HoldNote != nil {
		t.Fatalf("unhold %+v", v)
	}
	if rec := h.do("POST", "/v1/reviews/r1/decision", moderatorToken, decisionJSON("accepted", seen, "")); rec.Code != http.StatusOK {
		t.Fatalf("decision on the version before the hold: %d %s", rec.Code, rec.Body)
	}
}

// TestClaimsRequiredRoutes: on a class with claims: required only the
// live claim's holder decides; four-eyes approvers claim in turn.
func TestClaimsRequiredRoutes(t *testing.T) {
	h := newHarness(t)
	p := h.runner.policy.Classes["publishing_rule"]
	p.Claims = domain.ClaimsRequired
	h.runner.policy.Classes["publishing_rule"] = p
	h.submit("r1", "publishing_rule", "x")
	h.escalate("r1", domain.ReasonHumanGate)
	seen := h.version("r1")
	wantProblem(t, h.do("POST", "/v1/reviews/r1/decision", moderatorToken, decisionJSON("accepted", seen, "")), http.StatusConflict, "claim-required", "")
	wantProblem(t, h.do("POST", "/v1/manual-queue/r1/hold", moderatorToken, `{"note":"x"}`), http.StatusConflict, "claim-required", "")
	h.do("POST", "/v1/manual-queue/r1/claim", moderator2, "")
	pr := wantProblem(t, h.do("POST", "/v1/reviews/r1/decision", moderatorToken, decisionJSON("accepted", seen, "")), http.StatusConflict, "claimed-by-other", "")
	if pr.ClaimedBy != "max" || !contains(pr.Detail, "max") {
		t.Fatalf("problem %+v", pr)
	}
	// max votes with the claim (on the version seen before it); the vote
	// ends max's claim, so mona claims and decides.
	if rec := h.do("POST", "/v1/reviews/r1/decision", moderator2, decisionJSON("accepted", seen, "")); rec.Code != http.StatusOK {
		t.Fatalf("max's vote: %d %s", rec.Code, rec.Body)
	}
	wantProblem(t, h.do("POST", "/v1/reviews/r1/decision", moderatorToken, decisionJSON("accepted", h.version("r1"), "")), http.StatusConflict, "claim-required", "")
	if rec := h.do("POST", "/v1/manual-queue/r1/claim", moderatorToken, ""); rec.Code != http.StatusOK {
		t.Fatalf("mona's claim: %d %s", rec.Code, rec.Body)
	}
	rec := h.do("POST", "/v1/reviews/r1/decision", moderatorToken, decisionJSON("accepted", h.version("r1"), ""))
	if rec.Code != http.StatusOK || decode[reviewView](t, rec).State != "accepted" {
		t.Fatalf("mona's decision: %d %s", rec.Code, rec.Body)
	}
}

func TestTimelineRoute(t *testing.T) {
	h := newHarness(t)
	h.submit("r1", "caption_suggestion", "x")
	ctx := context.Background()
	rv, _ := h.ledger.Load(ctx, "r1")
	st, _ := rv.StartAttempt(h.now)
	st.Provider = "backup"
	rv, _ = h.ledger.Append(ctx, rv, ledger.Actor{Name: "engine"}, st)
	h.now = h.now.Add(1500 * time.Millisecond)
	to, _ := rv.TimeOutAttempt(domain.AttemptFailure{Attempt: 1, Classification: domain.ClassProviderUnavailable, Detail: "HTTP 503"}, h.now)
	if _, err := h.ledger.Append(ctx, rv, ledger.Actor{Name: "engine"}, to); err != nil {
		t.Fatal(err)
	}
	h.escalate("r1", domain.ReasonBudgetExhausted)
	h.do("POST", "/v1/manual-queue/r1/claim", moderatorToken, "")
	h.do("POST", "/v1/manual-queue/r1/requeue", moderatorToken, requeueJSON(h.version("r1"), "provider back"))

	for _, token := range []string{moderatorToken, auditorToken, adminToken} {
		rec := h.do("GET", "/v1/reviews/r1/timeline", token, "")
		if rec.Code != http.StatusOK {
			t.Fatalf("%d %s", rec.Code, rec.Body)
		}
		v := decode[timelineView](t, rec)
		var kinds []string
		for _, e := range v.Entries {
			kinds = append(kinds, e.Kind)
		}
		if want := "submitted attempt escalated claimed requeued"; strings.Join(kinds, " ") != want {
			t.Fatalf("kinds %v, want %s", kinds, want)
		}
		a, esc, rq := v.Entries[1], v.Entries[2], v.Entries[4]
		if a.Attempt != 1 || a.Provider != "backup" || a.Outcome != AttemptFailed || a.Classification != "provider_unavailable" || a.DurationMS == nil || *a.DurationMS != 1500 || a.Detail != "HTTP 503" {
			t.Fatalf("attempt %+v", a)
		}
		if esc.Reason != "budget_exhausted" || esc.State != "manual_review" || esc.Round != 1 {
			t.Fatalf("escalation %+v", esc)
		}
		if rq.Round != 2 || rq.Actor != "mona" || rq.Note != "provider back" || rq.Deadline == nil || v.Round != 2 || v.State != "pending" {
			t.Fatalf("requeue %+v, timeline %+v", rq, v)
		}
	}
	wantProblem(t, h.do("GET", "/v1/reviews/r1/timeline", submitterToken, ""), http.StatusForbidden, "forbidden", "")
	wantProblem(t, h.do("GET", "/v1/reviews/nope/timeline", moderatorToken, ""), http.StatusNotFound, "review-not-found", "")
	wantProblem(t, h.do("GET", "/v1/reviews/a%2Fb/timeline", moderatorToken, ""), http.StatusBadRequest, "invalid-review-id", "review_id")
}
