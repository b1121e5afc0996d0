package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/reviewledger/reviewledger/domain"
)

func decisionJSON(state string, version uint64, note string) string {
	return fmt.Sprintf(`{"state":%q,"note":%q,"expected_version":%d}`, state, note, version)
}

func TestDecision(t *testing.T) {
	h := newHarness(t)
	h.submit("r1", "caption_suggestion", "x")

	// Not in manual_review yet.
	wantProblem(t, h.do("POST", "/v1/reviews/r1/decision", moderatorToken, decisionJSON("accepted", 0, "")), http.StatusConflict, "not-in-manual-review", "")
	h.escalate("r1", domain.ReasonAttemptsExhausted)

	for _, tc := range []struct {
		name, body, kind, field string
	}{
		{"no expected_version", `{"state":"accepted"}`, "invalid-request", "expected_version"},
		{"null expected_version", `{"state":"accepted","expected_version":null}`, "invalid-request", "expected_version"},
		{"negative expected_version", `{"state":"accepted","expected_version":-1}`, "invalid-request", "expected_version"},
		{"bad state", decisionJSON("approved", 1, ""), "invalid-decision", "state"},
		{"no state", `{"expected_version":1}`, "invalid-decision", "state"},
		{"malformed", `{`, "invalid-request", "body"},
		{"state twice", `{"state":"rejected","state":"accepted","expected_version":1}`, "invalid-request", "state"},
		{"invalid UTF-8 in the note", "{\"state\":\"rejected\",\"note\":\"\xff\",\"expected_version\":1}", "invalid-request", "note"},
		{"a lone surrogate in the note", `{"state":"rejected","note":"\udc00","expected_version":1}`, "invalid-request", "note"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantProblem(t, h.do("POST", "/v1/reviews/r1/decision", moderatorToken, tc.body), http.StatusBadRequest, tc.kind, tc.field)
		})
	}
	wantProblem(t, h.do("POST", "/v1/reviews/nope/decision", moderatorToken, decisionJSON("accepted", 1, "")), http.StatusNotFound, "review-not-found", "")
	// The version moved.
	wantProblem(t, h.do("POST", "/v1/reviews/r1/decision", moderatorToken, decisionJSON("accepted", 0, "")), http.StatusConflict, "version-moved", "")

	rec := h.do("POST", "/v1/reviews/r1/decision", moderatorToken, decisionJSON("rejected", 1, "spam link"), "X-Request-Id", "dec-1")
	if rec.Code != http.StatusOK {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	v := decode[reviewView](t, rec)
	if v.State != "rejected" || v.Version != 2 || v.DecidedAt == nil || len(v.Reasons) != 1 || v.Reasons[0] != "spam link" {
		t.Fatalf("view %+v", v)
	}
	hist, err := h.ledger.History(context.Background(), "r1")
	if err != nil {
		t.Fatal(err)
	}
	last := hist.Events[2]
	d, ok := last.Event.(domain.ManualDecisionRecorded)
	if !ok || d.Moderator != "mona" || d.Note != "spam link" || last.Metadata.Actor != "mona" || last.Metadata.RequestID != "dec-1" {
		t.Fatalf("recorded %T %+v %+v", last.Event, last.Event, last.Metadata)
	}
	// Decided: not in manual_review any more.
	wantProblem(t, h.do("POST", "/v1/reviews/r1/decision", moderator2, decisionJSON("accepted", 2, "")), http.StatusConflict, "not-in-manual-review", "")
}

func TestDecisionFourEyes(t *testing.T) {
	h := newHarness(t)
	h.submit("rule-1", "publishing_rule", "publish at 9") // approvals: 2
	h.escalate("rule-1", domain.ReasonHumanGate)

	rec := h.do("POST", "/v1/reviews/rule-1/decision", moderatorToken, decisionJSON("accepted", 1, "fine"))
	if rec.Code != http.StatusOK {
		t.Fatalf("first approval: %d %s", rec.Code, rec.Body)
	}
	if v := decode[reviewView](t, rec); v.State != "manual_review" || v.Version != 2 || v.DecidedAt != nil {
		t.Fatalf("after one approval: %+v", v)
	}
	// The same moderator cannot approve twice.
	wantProblem(t, h.do("POST", "/v1/reviews/rule-1/decision", moderatorToken, decisionJSON("accepted", 2, "")), http.StatusConflict, "already-approved", "")
	// Admin counts as a distinct moderator under its own name.
	rec = h.do("POST", "/v1/reviews/rule-1/decision", moderator2, decisionJSON("accepted", 2, "agreed"))
	if rec.Code != http.StatusOK {
		t.Fatalf("second approval: %d %s", rec.Code, rec.Body)
	}
	if v := decode[reviewView](t, rec); v.State != "accepted" || v.DecidedAt == nil {
		t.Fatalf("after two approvals: %+v", v)
	}
	rv, err := h.ledger.Load(context.Background(), "rule-1")
	if err != nil {
		t.Fatal(err)
	}
	if rv.DecidedBy() != "max" {
		t.Fatalf("decided by %q", rv.DecidedBy())
	}
	if m := h.do("GET", "/metrics", "", "").Body.String(); !contains(m, `reviewledger_manual_decisions_total{outcome="approval_recorded"} 1`) || !contains(m, `reviewledger_manual_decisions_total{outcome="decided"} 1`) {
		t.Fatalf("decision metrics:\n%s", m)
	}
}

// TestConcurrentDecisions: moderators deciding one review at once on the
// same version: one decision is recorded, the others are told it moved.
func TestConcurrentDecisions(t *testing.T) {
	h := newHarness(t)
	h.submit("r1", "caption_suggestion", "x")
	h.escalate("r1", domain.ReasonAttemptsExhausted)
	codes := make(chan int, 8)
	var wg sync.WaitGroup
	for i := range 8 {
		token := []string{moderatorToken, moderator2}[i%2]
		state := []string{"accepted", "rejected"}[i%2]
		wg.Go(func() { codes <- h.do("POST", "/v1/reviews/r1/decision", token, decisionJSON(state, 1, "")).Code })
	}
	wg.Wait()
	close(codes)
	count := map[int]int{}
	for c := range codes {
		count[c]++
	}
	if count[http.StatusOK] != 1 || count[http.StatusConflict] != 7 {
		t.Fatalf("answers %v, want one 200 and seven 409", count)
	}
	hist, err := h.ledger.History(context.Background(), "r1")
	if err != nil || len(hist.Events) != 3 {
		t.Fatalf("history: %v %v", hist, err)
	}
}
