package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
)

// testSubmitAndRead: a review the provider accepts, the request the
// provider saw, resubmission, and every error status of submit and auth.
func testSubmitAndRead(t *testing.T, srv *e2eServer) {
	const id = "e2e-submit-0001"
	body := submitBody(id, "e2e_fast", content("caption: hello"))
	res := srv.expect(t, http.StatusAccepted, http.MethodPost, "/v1/reviews", tokSubmitter, body)
	first := decode[reviewView](t, res)
	if first.ReviewID != id || first.ContentClass != "e2e_fast" || first.SubmittedAt.IsZero() || !first.Deadline.After(first.SubmittedAt) {
		t.Errorf("submit answered %+v", first)
	}

	// The view of the review as submitted; a fast worker may have moved
	// it on by the time a GET follows.
	if first.State != "pending" || first.Attempts != 0 || first.DecidedAt != nil || first.Reasons == nil {
		t.Errorf("submit answered %s, want a pending review with no attempts and reasons []", res.Body)
	}
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("submit answered Content-Type %q", ct)
	}
	reviewKeys := []string{"review_id", "state", "content_class", "attempts", "version", "submitted_at", "deadline", "decided_at", "reasons"}
	hasKeys(t, "submit view", res.Body, reviewKeys...)

	got := srv.waitSettled(t, id)
	hasKeys(t, "review view", srv.expect(t, http.StatusOK, http.MethodGet, "/v1/reviews/"+id, tokAuditor, nil).Body, reviewKeys...)
	if got.State != "accepted" || got.Attempts != 1 || got.DecidedAt == nil || got.DecidedAt.Before(got.SubmittedAt) {
		t.Fatalf("review %+v, want accepted after 1 attempt with decided_at set", got)
	}
	if got.DecidedByProvider != "default" {
		t.Errorf("decided_by_provider %q, want default (the REVIEWLEDGER_PROVIDER* provider)", got.DecidedByProvider)
	}
	if !slices.Equal(got.Reasons, []string{"looks fine"}) {
		t.Errorf("reasons %q, want the provider's", got.Reasons)
	}

	t.Run("the provider saw one attempt as the provider protocol says", func(t *testing.T) {
		calls := srv.Provider.seen(id)
		if len(calls) != 1 {
			t.Fatalf("provider saw %d requests, want 1", len(calls))
		}
		c := calls[0]
		if c.IdempotencyKey != id || c.Attempt != "1" || !strings.HasPrefix(c.ContentType, "application/json") {
			t.Errorf("headers: Idempotency-Key %q, X-Review-Attempt %q, Content-Type %q", c.IdempotencyKey, c.Attempt, c.ContentType)
		}
		want := map[string]any{"review_id": id, "attempt": float64(1), "content_class": "e2e_fast", "content_type": "text/plain", "content": content("caption: hello")}
		if !reflect.DeepEqual(c.Body, want) {
			t.Errorf("body %v\nwant %v", c.Body, want)
		}
	})

	t.Run("the same submission again answers 200 with the same view", func(t *testing.T) {
		again := decode[reviewView](t, srv.expect(t, http.StatusOK, http.MethodPost, "/v1/reviews", tokSubmitter, body))
		if !reflect.DeepEqual(again, srv.review(t, id)) {
			t.Errorf("resubmit view %+v differs from GET", again)
		}
		if n := len(srv.Provider.seen(id)); n != 1 {
			t.Errorf("provider saw %d requests after a resubmission, want 1", n)
		}
	})

	t.Run("sixteen concurrent submissions make one review", func(t *testing.T) {
		const id = "e2e-submit-concurrent"
		statuses := make([]int, 16)
		var wg sync.WaitGroup
		for i := range statuses {
			wg.Go(func() {
				statuses[i] = srv.call(t, http.MethodPost, "/v1/reviews", tokSubmitter, submitBody(id, "e2e_fast", content("same"))).Status
			})
		}
		wg.Wait()
		counts := map[int]int{}
		for _, s := range statuses {
			counts[s]++
		}
		if counts[http.StatusAccepted] != 1 || counts[http.StatusOK] != 15 {
			t.Errorf("statuses %v, want one 202 and fifteen 200", counts)
		}
		srv.waitSettled(t, id)
		if n := len(ofType(srv.events(t, id), "Submitted")); n != 1 {
			t.Errorf("%d Submitted events, want 1", n)
		}
	})

	t.Run("errors", func(t *testing.T) {
		pr := srv.expectProblem(t, http.StatusConflict, http.MethodPost, "/v1/reviews", tokSubmitter, submitBody(id, "e2e_fast", content("other text")))
		if !strings.Contains(pr.Type, "review-exists") {
			t.Errorf("other content: problem type %q", pr.Type)
		}
		srv.expectProblem(t, http.StatusConflict, http.MethodPost, "/v1/reviews", tokSubmitter, submitBody(id, "e2e_gate", content("caption: hello")))
		pr = srv.expectProblem(t, http.StatusUnprocessableEntity, http.MethodPost, "/v1/reviews", tokSubmitter, submitBody("e2e-unknown-class", "no_such_class", content("x")))
		if pr.Field != "content_class" {
			t.Errorf("unknown class names field %q, want content_class", pr.Field)
		}
		for _, bad := range []string{"has space", "", strings.Repeat("a", 129), "slash/inside", "ümlaut"} {
			pr := srv.expectProblem(t, http.StatusBadRequest, http.MethodPost, "/v1/reviews", tokSubmitter, submitBody(bad, "e2e_fast", content("x")))
			if pr.Field != "review_id" && !strings.Contains(pr.Detail, "review_id") {
				t.Errorf("bad ID %q: problem %+v does not name review_id", bad, pr)
			}
		}
		srv.expectProblem(t, http.StatusBadRequest, http.MethodPost, "/v1/reviews", tokSubmitter, []byte(`{"review_id":`))
		big := submitBody("e2e-too-big", "e2e_fast", content(strings.Repeat("x", e2eMaxBody)))
		srv.expectProblem(t, http.StatusRequestEntityTooLarge, http.MethodPost, "/v1/reviews", tokSubmitter, big)
		raw, _ := json.Marshal(big)
		srv.expectProblem(t, http.StatusRequestEntityTooLarge, http.MethodPost, "/v1/reviews", tokSubmitter, io.MultiReader(bytes.NewReader(raw)))
		srv.expectProblem(t, http.StatusNotFound, http.MethodGet, "/v1/reviews/e2e-never-submitted", tokSubmitter, nil)
		if res := srv.call(t, http.MethodGet, "/v1/reviews/e2e-too-big", tokSubmitter, nil); res.Status != http.StatusNotFound {
			t.Errorf("a refused submission was stored: %s", res)
		}
	})

	t.Run("authentication and roles", func(t *testing.T) {
		routes := []struct {
			method, path string
			body         any
			allowed      []string // tokens whose role may call it, besides admin
			refused      []string
		}{
			{http.MethodPost, "/v1/reviews", submitBody(id, "e2e_fast", content("caption: hello")), []string{tokSubmitter}, []string{tokModerator, tokAuditor}},
			{http.MethodGet, "/v1/reviews/" + id, nil, []string{tokSubmitter, tokModerator, tokAuditor}, nil},
			{http.MethodGet, "/v1/reviews/" + id + "/events", nil, []string{tokAuditor}, []string{tokSubmitter, tokModerator}},
			{http.MethodGet, "/v1/manual-queue", nil, []string{tokModerator}, []string{tokSubmitter, tokAuditor}},
			{http.MethodPost, "/v1/manual-queue/" + id + "/claim", nil, []string{tokModerator}, []string{tokSubmitter, tokAuditor}},
			{http.MethodPost, "/v1/reviews/" + id + "/decision", map[string]any{"state": "accepted", "expected_version": 0}, []string{tokModerator}, []string{tokSubmitter, tokAuditor}},
			{http.MethodGet, "/v1/slo", nil, []string{tokModerator, tokAuditor}, []string{tokSubmitter}},
		}
		for _, r := range routes {
			name := r.method + " " + r.path
			res := srv.call(t, r.method, r.path, "", r.body)
			checkProblem(t, res, http.StatusUnauthorized)
			if res.Status != http.StatusUnauthorized {
				t.Errorf("%s without a token: %s", name, res)
			}
			if res := srv.call(t, r.method, r.path, "not-a-configured-token-000", r.body); res.Status != http.StatusUnauthorized {
				t.Errorf("%s with an unknown token: %s", name, res)
			}
			for _, tok := range r.refused {
				res := srv.call(t, r.method, r.path, tok, r.body)
				checkProblem(t, res, http.StatusForbidden)
				if res.Status != http.StatusForbidden {
					t.Errorf("%s with token %s: %s, want 403", name, tok[:12], res)
				}
			}
			// Claim and decision answer 409 on this accepted review: the
			// role passed.
			for _, tok := range append(slices.Clone(r.allowed), tokAdmin) {
				res := srv.call(t, r.method, r.path, tok, r.body)
				if res.Status == http.StatusUnauthorized || res.Status == http.StatusForbidden || res.Status >= 500 {
					t.Errorf("%s with token %s: %s, want the role to pass", name, tok[:12], res)
				}
			}
		}
		for _, path := range []string{"/healthz", "/metrics", "/openapi.json", "/"} {
			srv.expect(t, http.StatusOK, http.MethodGet, path, "", nil)
		}
	})
}

// testTimeoutsEscalate: a provider that never answers. The review ends in
// manual_review after max_attempts, never in a decision; moderators claim
// and decide it.
func testTimeoutsEscalate(t *testing.T, srv *e2eServer) {
	const id = "e2e-timeouts-0001"
	srv.Provider.script(id, hang())
	srv.submit(t, id, "e2e_fast", content("never answered"))

	got := srv.waitSettled(t, id)
	if got.State != "manual_review" || got.Attempts != 3 || got.DecidedAt != nil {
		t.Fatalf("review %+v, want manual_review after 3 attempts, not decided", got)
	}
	raw := srv.expect(t, http.StatusOK, http.MethodGet, "/v1/reviews/"+id+"/events", tokAuditor, nil)
	hasKeys(t, "events", raw.Body, "review_id", "events")
	for _, e := range decode[struct {
		Events []json.RawMessage `json:"events"`
	}](t, raw).Events {
		hasKeys(t, "event", e, "version", "type", "recorded_at", "data")
	}
	evs := srv.events(t, id)
	want := []string{"Submitted",
		"AttemptStarted", "AttemptTimedOut",
		"AttemptStarted", "AttemptTimedOut",
		"AttemptStarted", "AttemptTimedOut",
		"Escalated"}
	if !slices.Equal(eventTypes(evs), want) {
		t.Fatalf("events %v\nwant %v", eventTypes(evs), want)
	}
	for i, e := range ofType(evs, "AttemptTimedOut") {
		if e.field("classification") != "deadline_exceeded" || e.field("attempt") != float64(i+1) {
			t.Errorf("AttemptTimedOut %s", e.Data)
		}
	}
	esc := evs[len(evs)-1]
	if esc.field("state") != "manual_review" || esc.field("reason") != "attempts_exhausted" {
		t.Errorf("Escalated %s, want manual_review for attempts_exhausted", esc.Data)
	}
	// Within the budget, by the server's own clock.
	if at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(esc.field("at"))); err != nil || at.After(got.Deadline) {
		t.Errorf("escalated at %v (%v), after the deadline %s", esc.field("at"), err, got.Deadline)
	}
	calls := srv.Provider.seen(id)
	if len(calls) != 3 {
		t.Fatalf("provider saw %d attempts, want 3", len(calls))
	}
	// Each request was cancelled at its attempt's timeout, not left open.
	clocktest.EventuallyShows(t, "the provider to see all three requests cancelled", func() (bool, string) {
		n := srv.Provider.cancellations(id)
		return n == 3, fmt.Sprintf("%d cancelled", n)
	})
	for i, c := range calls {
		if c.IdempotencyKey != id || c.Attempt != strconv.Itoa(i+1) || c.Body["attempt"] != float64(i+1) {
			t.Errorf("attempt %d: Idempotency-Key %q, X-Review-Attempt %q, body attempt %v", i+1, c.IdempotencyKey, c.Attempt, c.Body["attempt"])
		}
	}

	it := srv.waitQueued(t, id, "e2e_fast")
	hasKeys(t, "queue", srv.expect(t, http.StatusOK, http.MethodGet, "/v1/manual-queue", tokModerator, nil).Body, "items")
	if it.Reason != "attempts_exhausted" || it.Attempts != 3 || it.ContentClass != "e2e_fast" || it.ClaimedBy != nil || it.EscalatedAt.IsZero() {
		t.Errorf("queue item %+v", it)
	}

	claim := decode[map[string]any](t, srv.expect(t, http.StatusOK, http.MethodPost, "/v1/manual-queue/"+id+"/claim", tokModerator, nil))
	if claim["claimed_by"] != "mona" || claim["claim_expires_at"] == nil {
		t.Errorf("claim answered %v", claim)
	}
	pr := srv.expectProblem(t, http.StatusConflict, http.MethodPost, "/v1/manual-queue/"+id+"/claim", tokModerator2, nil)
	if !strings.Contains(pr.Type, "claimed-by-other") {
		t.Errorf("second claim: problem type %q", pr.Type)
	}
	clocktest.EventuallyShows(t, "the claim to show in the queue", func() (bool, string) {
		it, _ := queued(srv.queue(t, "?content_class=e2e_fast&limit=1000"), id)
		return it.ClaimedBy != nil && *it.ClaimedBy == "mona" && it.ClaimExpiresAt != nil, fmt.Sprintf("%+v", it)
	})

	decision := func(v uint64) map[string]any {
		return map[string]any{"state": "accepted", "note": "checked by hand", "expected_version": v}
	}
	srv.expectProblem(t, http.StatusConflict, http.MethodPost, "/v1/reviews/"+id+"/decision", tokModerator, decision(got.Version-1))
	srv.expectProblem(t, http.StatusBadRequest, http.MethodPost, "/v1/reviews/"+id+"/decision", tokModerator, map[string]any{"state": "accepted"})
	srv.expectProblem(t, http.StatusBadRequest, http.MethodPost, "/v1/reviews/"+id+"/decision", tokModerator, map[string]any{"state": "maybe", "expected_version": got.Version})
	// The claim is an event of the review (it moved the version), yet the
	// version read before it is still the one to decide on; the decision
	// is the event that follows the claim.
	claimVersion, _ := claim["version"].(float64)
	if uint64(claimVersion) != got.Version+1 {
		t.Errorf("claim answered version %v, want %d", claim["version"], got.Version+1)
	}
	decided := decode[reviewView](t, srv.expect(t, http.StatusOK, http.MethodPost, "/v1/reviews/"+id+"/decision", tokModerator, decision(got.Version)))
	if decided.State != "accepted" || decided.DecidedAt == nil || decided.Version != got.Version+2 {
		t.Errorf("decision answered %+v", decided)
	}
	if now := srv.review(t, id); now.State != "accepted" {
		t.Errorf("review %+v after the decision", now)
	}
	last := srv.events(t, id)
	if e := last[len(last)-1]; e.Type != "ManualDecisionRecorded" || e.field("moderator") != "mona" || e.field("note") != "checked by hand" {
		t.Errorf("last event %s %s", e.Type, e.Data)
	}
	srv.waitUnqueued(t, id, "e2e_fast")
	srv.expectProblem(t, http.StatusConflict, http.MethodPost, "/v1/reviews/"+id+"/decision", tokModerator, decision(decided.Version))
}

// testCallbacks: asynchronous findings by signed callback, on time and late,
// and refused signatures; then the SLO of their class, which only they use.
func testCallbacks(t *testing.T, srv *e2eServer) {
	t.Run("each", func(t *testing.T) { testEachCallback(t, srv) })
	if t.Failed() {
		return
	}
	// Three findings within budget, one escalation, two conflicting
	// completions (the late callback and the one after the decision).
	var s sloView
	var raw response
	clocktest.EventuallyShows(t, "the e2e_async outcomes in /v1/slo", func() (bool, string) {
		raw = srv.expect(t, http.StatusOK, http.MethodGet, "/v1/slo?window=1h&content_class=e2e_async", tokModerator, nil)
		s = decode[sloView](t, raw)
		// Each read model catches up on its own.
		return s.Total == 4 && s.CompletedWithinBudget+s.Escalated == 4 && s.ConflictingCompletions >= 2 && s.ManualQueue.Depth == 1,
			fmt.Sprintf("%+v", s)
	})
	// Every 409 answered to a signed callback is one conflicting
	// completion (docs/contracts.md §4); only this class's reviews get callbacks.
	if want := srv.Provider.conflicts.Load(); s.ConflictingCompletions != want {
		clocktest.EventuallyShows(t, "every callback answered 409 in /v1/slo", func() (bool, string) {
			s = decode[sloView](t, srv.expect(t, http.StatusOK, http.MethodGet, "/v1/slo?window=1h&content_class=e2e_async", tokModerator, nil))
			return s.ConflictingCompletions == want, fmt.Sprintf("%d conflicting completions, %d callbacks answered 409", s.ConflictingCompletions, want)
		})
	}
	hasKeys(t, "/v1/slo", raw.Body, "total", "completed_within_budget", "within_budget_ratio", "escalated", "conflicting_completions", "latency_ms", "manual_queue")
	if s.CompletedWithinBudget != 3 || s.Escalated != 1 || s.WithinBudgetRatio != 0.75 ||
		s.LatencyMS.P50 <= 0 || s.LatencyMS.P99 < s.LatencyMS.P50 || s.ManualQueue.Depth != 1 {
		t.Errorf("SLO of e2e_async %+v, want 4 reviews: 3 within budget, 1 escalated and queued", s)
	}
}

func testEachCallback(t *testing.T, srv *e2eServer) {
	t.Run("an on-time callback decides", func(t *testing.T) {
		t.Parallel()
		const id = "e2e-callback-ontime"
		srv.Provider.script(id, async("rejected", "spam link"))
		srv.submit(t, id, "e2e_async", content("async"))
		got := srv.waitSettled(t, id)
		if got.State != "rejected" || got.Attempts != 1 || !slices.Equal(got.Reasons, []string{"spam link"}) {
			t.Fatalf("review %+v, want rejected after 1 attempt for the callback's reason", got)
		}
		// The provider records the answer after the review has moved.
		clocktest.EventuallyShows(t, "the callback's answer", func() (bool, string) {
			st := srv.Provider.callbackStatuses(id)
			return len(st) > 0, "none yet"
		})
		if st := srv.Provider.callbackStatuses(id); !slices.Equal(st, []int{http.StatusOK}) {
			t.Errorf("callback statuses %v, want [200]", st)
		}
		f := ofType(srv.events(t, id), "FindingReceived")
		if len(f) != 1 || f[0].field("source") != "callback" || f[0].field("attempt") != float64(1) {
			t.Errorf("findings %v", f)
		}
	})

	t.Run("a late callback is a conflicting completion", func(t *testing.T) {
		t.Parallel()
		const id = "e2e-callback-late"
		srv.Provider.script(id, async(""), accept())
		srv.submit(t, id, "e2e_async", content("late"))
		clocktest.EventuallyShows(t, "attempt 1 to time out", func() (bool, string) {
			evs := srv.events(t, id)
			for _, e := range ofType(evs, "AttemptTimedOut") {
				if e.field("attempt") == float64(1) {
					return true, ""
				}
			}
			return false, fmt.Sprint(eventTypes(evs))
		})
		res, err := srv.Provider.postCallback(id, 1, "rejected", []string{"too late"}, time.Now(), e2eSecretKey)
		if err != nil {
			t.Fatal(err)
		}
		checkProblem(t, res, http.StatusConflict)
		if res.Status != http.StatusConflict {
			t.Fatalf("late callback: %s, want 409", res)
		}
		got := srv.waitSettled(t, id)
		if got.State != "accepted" || got.Attempts != 2 {
			t.Errorf("review %+v, want accepted by attempt 2, untouched by the late callback", got)
		}
		for _, f := range ofType(srv.events(t, id), "FindingReceived") {
			if f.field("attempt") != float64(2) {
				t.Errorf("finding of attempt %v recorded", f.field("attempt"))
			}
		}
		clocktest.EventuallyShows(t, "the conflicting completion in /v1/slo", func() (bool, string) {
			s := decode[sloView](t, srv.expect(t, http.StatusOK, http.MethodGet, "/v1/slo?window=1h&content_class=e2e_async", tokAuditor, nil))
			return s.ConflictingCompletions >= 1, fmt.Sprintf("%+v", s)
		})
	})

	t.Run("a callback for a decided review is a conflict", func(t *testing.T) {
		t.Parallel()
		const id = "e2e-callback-decided"
		srv.submit(t, id, "e2e_async", content("decided by response"))
		if got := srv.waitSettled(t, id); got.State != "accepted" {
			t.Fatalf("review %+v, want accepted", got)
		}
		res, err := srv.Provider.postCallback(id, 1, "rejected", []string{"second opinion"}, time.Now(), e2eSecretKey)
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != http.StatusConflict {
			t.Fatalf("callback after the decision: %s, want 409", res)
		}
		checkProblem(t, res, http.StatusConflict)
		if got := srv.review(t, id); got.State != "accepted" || len(ofType(srv.events(t, id), "FindingReceived")) != 1 {
			t.Errorf("review %+v changed by a callback after its decision", got)
		}
	})

	t.Run("bad and stale signatures are refused", func(t *testing.T) {
		t.Parallel()
		const id = "e2e-callback-unsigned"
		// Attempt 1 waits for a callback that never verifies; attempt 2 is
		// refused, so the review escalates without waiting out a third.
		srv.Provider.script(id, async(""), status(http.StatusBadRequest, ""))
		srv.submit(t, id, "e2e_async", content("unsigned"))
		clocktest.EventuallyShows(t, "attempt 1 to start", func() (bool, string) {
			return len(srv.Provider.seen(id)) >= 1, "no request yet"
		})
		// While it is pending, a moderator can neither claim nor decide it.
		pending := srv.review(t, id)
		srv.expectProblem(t, http.StatusConflict, http.MethodPost, "/v1/manual-queue/"+id+"/claim", tokModerator, nil)
		pr := srv.expectProblem(t, http.StatusConflict, http.MethodPost, "/v1/reviews/"+id+"/decision", tokModerator,
			map[string]any{"state": "accepted", "expected_version": pending.Version})
		if !strings.Contains(pr.Type, "not-in-manual-review") && !strings.Contains(pr.Type, "version-moved") {
			t.Errorf("decision on a pending review: problem type %q", pr.Type)
		}
		for name, send := range map[string]func() (response, error){
			"wrong key": func() (response, error) {
				return srv.Provider.postCallback(id, 1, "accepted", nil, time.Now(), []byte("some-other-key-0123456789abcdef!"))
			},
			"stale timestamp": func() (response, error) {
				return srv.Provider.postCallback(id, 1, "accepted", nil, time.Now().Add(-10*time.Minute), e2eSecretKey)
			},
			"timestamp from the future": func() (response, error) {
				return srv.Provider.postCallback(id, 1, "accepted", nil, time.Now().Add(10*time.Minute), e2eSecretKey)
			},
		} {
			res, err := send()
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != http.StatusUnauthorized {
				t.Errorf("%s: %s, want 401", name, res)
				continue
			}
			checkProblem(t, res, http.StatusUnauthorized)
		}
		res := srv.call(t, http.MethodPost, "/v1/reviews/"+id+"/findings", "", map[string]any{"review_id": id, "attempt": 1, "state": "accepted"})
		if res.Status != http.StatusUnauthorized {
			t.Errorf("unsigned callback: %s, want 401", res)
		}
		// Correctly signed, but not a finding for the attempt in flight.
		for name, body := range map[string]map[string]any{
			"another attempt":  {"review_id": id, "attempt": 2, "state": "accepted", "reasons": []string{}},
			"another review":   {"review_id": "e2e-callback-ontime", "attempt": 1, "state": "accepted", "reasons": []string{}},
			"incomplete":       {"review_id": id, "attempt": 1, "state": "maybe", "reasons": []string{}},
			"no attempt given": {"review_id": id, "state": "accepted", "reasons": []string{}},
		} {
			raw, _ := json.Marshal(body)
			res, err := srv.Provider.postCallbackBody(id, raw, time.Now(), e2eSecretKey)
			if err != nil {
				t.Fatal(err)
			}
			if res.Status/100 != 4 {
				t.Errorf("callback for %s: %s, want it refused", name, res)
			}
		}
		got := srv.waitSettled(t, id)
		if got.State != "manual_review" || len(ofType(srv.events(t, id), "FindingReceived")) != 0 {
			t.Errorf("review %+v after refused callbacks, want manual_review with no finding", got)
		}
	})
}

// testProviderAnswers: the rows of the docs/contracts.md §4 table.
func testProviderAnswers(t *testing.T, srv *e2eServer) {
	cases := []struct {
		name     string
		id       string
		steps    []step
		state    string
		attempts int
		closed   []string // classifications of the AttemptTimedOut events, in order
		reason   string   // of the Escalated event, if any
	}{
		{
			name: "429 with Retry-After is retried within the budget", id: "e2e-answer-429",
			steps: []step{status(http.StatusTooManyRequests, "1"), accept()},
			state: "accepted", attempts: 2, closed: []string{"rate_limited"},
		},
		{
			name: "503 and 500 are retried", id: "e2e-answer-5xx",
			steps: []step{status(http.StatusServiceUnavailable, ""), status(http.StatusInternalServerError, ""), finding("rejected", "hate speech")},
			state: "rejected", attempts: 3, closed: []string{"provider_unavailable", "*"},
		},
		{
			name: "400 escalates at once", id: "e2e-answer-400",
			steps: []step{status(http.StatusBadRequest, "")},
			state: "manual_review", attempts: 1, closed: []string{"*"}, reason: "provider_refused",
		},
		{
			name: "invalid findings are never decisions", id: "e2e-answer-invalid",
			steps: []step{
				answer200(func(id string) any { return map[string]any{"review_id": id, "state": "maybe"} }),
				answer200(func(string) any { return map[string]any{"review_id": "someone-else", "state": "rejected"} }),
				answer200(func(string) any { return "not a finding" }),
			},
			state: "manual_review", attempts: 3, closed: []string{"invalid_finding", "invalid_finding", "invalid_finding"}, reason: "attempts_exhausted",
		},
		{
			name: "Retry-After as an HTTP date, or unreadable", id: "e2e-answer-retry-after-forms",
			steps: []step{
				func(p *scriptedProvider, w http.ResponseWriter, r *http.Request, id string, n int) {
					status(http.StatusServiceUnavailable, time.Now().Add(2*time.Second).UTC().Format(http.TimeFormat))(p, w, r, id, n)
				},
				status(http.StatusTooManyRequests, "soon"),
				accept(),
			},
			state: "accepted", attempts: 3, closed: []string{"provider_unavailable", "rate_limited"},
		},
		{
			name: "a finding cut off at the attempt timeout is no decision", id: "e2e-answer-cut-off",
			steps: []step{cutOff(), accept()},
			state: "accepted", attempts: 2, closed: []string{"deadline_exceeded"},
		},
		{
			name: "a dropped connection is retried", id: "e2e-answer-reset",
			steps: []step{resetConnection(), accept()},
			state: "accepted", attempts: 2, closed: []string{"transport_error"},
		},
		{
			name: "a callback before the 202 decides", id: "e2e-answer-callback-first",
			steps: []step{callbackFirst("rejected")},
			state: "rejected", attempts: 1, closed: []string{},
		},
		{
			name: "an invalid finding is retried", id: "e2e-answer-invalid-then-valid",
			steps: []step{answer200(func(id string) any { return map[string]any{"review_id": id, "reasons": []string{}} }), accept()},
			state: "accepted", attempts: 2, closed: []string{"invalid_finding"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv.Provider.script(tc.id, tc.steps...)
			srv.submit(t, tc.id, "e2e_fast", content(tc.name))
			got := srv.waitSettled(t, tc.id)
			if got.State != tc.state || got.Attempts != tc.attempts {
				t.Fatalf("review %+v, want %s after %d attempts", got, tc.state, tc.attempts)
			}
			evs := srv.events(t, tc.id)
			timedOut := ofType(evs, "AttemptTimedOut")
			if len(timedOut) != len(tc.closed) {
				t.Fatalf("%d AttemptTimedOut, want %d: %v", len(timedOut), len(tc.closed), eventTypes(evs))
			}
			for i, e := range timedOut {
				if tc.closed[i] != "*" && e.field("classification") != tc.closed[i] {
					t.Errorf("attempt %d closed as %v, want %s", i+1, e.field("classification"), tc.closed[i])
				}
			}
			findings := ofType(evs, "FindingReceived")
			if tc.state == "manual_review" {
				if len(findings) != 0 {
					t.Errorf("findings recorded: %v", findings)
				}
				esc := ofType(evs, "Escalated")
				if len(esc) != 1 || esc[0].field("reason") != tc.reason {
					t.Errorf("escalations %v, want one for %s", esc, tc.reason)
				}
			} else if len(findings) != 1 || findings[0].field("attempt") != float64(tc.attempts) {
				t.Errorf("findings %v, want one, of the last attempt", findings)
			}
			// One request per attempt (docs/contracts.md §4): nothing resends one.
			calls := srv.Provider.seen(tc.id)
			var numbers []string
			for _, c := range calls {
				numbers = append(numbers, c.Attempt)
			}
			if len(calls) != tc.attempts {
				t.Errorf("provider saw %d requests (X-Review-Attempt %v) for %d attempts", len(calls), numbers, tc.attempts)
			}
		})
	}
	t.Run("a Retry-After past the deadline is not waited for", func(t *testing.T) {
		t.Parallel()
		const id = "e2e-answer-429-past-deadline"
		srv.Provider.script(id, status(http.StatusTooManyRequests, "3600"), accept())
		srv.submit(t, id, "e2e_fast", content("429 for an hour"))
		got := srv.waitSettled(t, id)
		if got.State != "manual_review" || got.Attempts != 1 {
			t.Fatalf("review %+v, want manual_review after 1 attempt", got)
		}
		evs := srv.events(t, id)
		esc := ofType(evs, "Escalated")
		if len(esc) != 1 {
			t.Fatalf("events %v, want one escalation", eventTypes(evs))
		}
		if at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(esc[0].field("at"))); err != nil || !at.Before(got.Deadline) {
			t.Errorf("escalated at %v (%v), not before the deadline %s: the retry was waited for", esc[0].field("at"), err, got.Deadline)
		}
	})

	t.Run("429 wait is recorded", func(t *testing.T) {
		t.Parallel()
		// Its own review: the case above may still run.
		const id = "e2e-answer-429-recorded"
		srv.Provider.script(id, status(http.StatusTooManyRequests, "1"), accept())
		srv.submit(t, id, "e2e_fast", content("429"))
		srv.waitSettled(t, id)
		evs := srv.events(t, id)
		to := ofType(evs, "AttemptTimedOut")
		if len(to) != 1 || to[0].field("retry_after_ms") != float64(1000) {
			t.Fatalf("AttemptTimedOut %v, want retry_after_ms 1000", to)
		}
		// The retry waited as asked, by the server's own clock.
		closedAt, err1 := time.Parse(time.RFC3339Nano, fmt.Sprint(to[0].field("at")))
		started := ofType(evs, "AttemptStarted")
		retriedAt, err2 := time.Parse(time.RFC3339Nano, fmt.Sprint(started[len(started)-1].field("started_at")))
		if err1 != nil || err2 != nil || retriedAt.Sub(closedAt) < time.Second {
			t.Errorf("attempt 2 started at %s, attempt 1 answered 429 at %s with Retry-After: 1 (%v, %v)", retriedAt, closedAt, err1, err2)
		}
	})
}

// testClassPolicies: on_exhaustion rejected, human_gate and four-eyes.
func testClassPolicies(t *testing.T, srv *e2eServer) {
	t.Run("a fail-closed class rejects when exhausted", func(t *testing.T) {
		t.Parallel()
		const id = "e2e-policy-closed"
		srv.Provider.script(id, status(http.StatusServiceUnavailable, ""))
		srv.submit(t, id, "e2e_closed", content("closed"))
		got := srv.waitSettled(t, id)
		if got.State != "rejected" || got.Attempts != 3 || got.DecidedAt == nil {
			t.Fatalf("review %+v, want rejected after 3 attempts", got)
		}
		esc := ofType(srv.events(t, id), "Escalated")
		if len(esc) != 1 || esc[0].field("state") != "rejected" {
			t.Errorf("escalations %v", esc)
		}
		if len(ofType(srv.events(t, id), "FindingReceived")) != 0 {
			t.Error("a finding was recorded for a provider that never answered")
		}
		srv.expectProblem(t, http.StatusConflict, http.MethodPost, "/v1/manual-queue/"+id+"/claim", tokModerator, nil)
	})

	t.Run("a human-gate class sends acceptances to a moderator", func(t *testing.T) {
		t.Parallel()
		const id = "e2e-policy-gate"
		srv.submit(t, id, "e2e_gate", content("gated"))
		got := srv.waitSettled(t, id)
		if got.State != "manual_review" || got.DecidedAt != nil {
			t.Fatalf("review %+v, want manual_review", got)
		}
		evs := srv.events(t, id)
		if len(ofType(evs, "FindingReceived")) != 1 || ofType(evs, "Escalated")[0].field("reason") != "human_gate" {
			t.Errorf("events %v", eventTypes(evs))
		}
		it := srv.waitQueued(t, id, "e2e_gate")
		if it.Reason != "human_gate" {
			t.Errorf("queue item %+v", it)
		}
	})

	t.Run("a four-eyes class needs two moderators", func(t *testing.T) {
		t.Parallel()
		const id = "e2e-policy-four-eyes"
		srv.submit(t, id, "e2e_four_eyes", content("restricted"))
		got := srv.waitSettled(t, id)
		if got.State != "manual_review" {
			t.Fatalf("review %+v, want manual_review", got)
		}
		vote := func(v uint64) map[string]any {
			return map[string]any{"state": "rejected", "note": "restricted", "expected_version": v}
		}
		one := decode[reviewView](t, srv.expect(t, http.StatusOK, http.MethodPost, "/v1/reviews/"+id+"/decision", tokModerator, vote(got.Version)))
		if one.State != "manual_review" || one.Version != got.Version+1 || one.DecidedAt != nil {
			t.Fatalf("after one vote: %+v, want still manual_review", one)
		}
		pr := srv.expectProblem(t, http.StatusConflict, http.MethodPost, "/v1/reviews/"+id+"/decision", tokModerator, vote(one.Version))
		if !strings.Contains(pr.Type, "already-approved") {
			t.Errorf("second vote of the same moderator: problem type %q", pr.Type)
		}
		two := decode[reviewView](t, srv.expect(t, http.StatusOK, http.MethodPost, "/v1/reviews/"+id+"/decision", tokModerator2, vote(one.Version)))
		if two.State != "rejected" || two.DecidedAt == nil {
			t.Fatalf("after two votes: %+v, want rejected", two)
		}
		evs := srv.events(t, id)
		last := evs[len(evs)-1]
		approvers, _ := last.field("approvers").([]any)
		got2 := make([]string, 0, len(approvers))
		for _, a := range approvers {
			got2 = append(got2, fmt.Sprint(a))
		}
		slices.Sort(got2)
		if last.Type != "ManualDecisionRecorded" || !slices.Equal(got2, []string{"max", "mona"}) {
			t.Errorf("last event %s %s, want a decision approved by max and mona", last.Type, last.Data)
		}
		srv.waitUnqueued(t, id, "e2e_four_eyes")
	})
}

// sloComparable is /v1/slo without the fields that move with the clock.
func sloComparable(s map[string]any) map[string]any {
	out := maps.Clone(s)
	delete(out, "from")
	delete(out, "to")
	if q, ok := out["manual_queue"].(map[string]any); ok {
		q = maps.Clone(q)
		delete(q, "oldest_age_seconds")
		out["manual_queue"] = q
	}
	return out
}

// e2ePriority is each class's priority in e2ePolicy.
var e2ePriority = map[string]int{
	"e2e_fast": 1, "e2e_async": 1, "e2e_closed": 1, "e2e_gate": 2, "e2e_four_eyes": 3, "e2e_crash": 1, "e2e_crash_short": 1,
}

// testQueueAndReads runs after the other scenarios of the shared server:
// the manual queue's order and limits, and the remaining read errors.
func testQueueAndReads(t *testing.T, srv *e2eServer) {
	raw := srv.expect(t, http.StatusOK, http.MethodGet, "/v1/manual-queue", tokModerator, nil)
	for _, it := range decode[struct {
		Items []json.RawMessage `json:"items"`
	}](t, raw).Items {
		hasKeys(t, "queue item", it, "review_id", "content_class", "reason", "attempts", "escalated_at", "age_seconds", "claimed_by", "claim_expires_at")
	}
	items := decode[struct {
		Items []queueItem `json:"items"`
	}](t, raw).Items
	if len(items) < 3 {
		t.Fatalf("%d items in the queue, want the escalations of the scenarios before", len(items))
	}
	for i := 1; i < len(items); i++ {
		a, b := items[i-1], items[i]
		pa, pb := e2ePriority[a.ContentClass], e2ePriority[b.ContentClass]
		if pa < pb || (pa == pb && a.EscalatedAt.After(b.EscalatedAt)) {
			t.Errorf("queue order: %s (priority %d, escalated %s) before %s (priority %d, escalated %s)",
				a.ReviewID, pa, a.EscalatedAt, b.ReviewID, pb, b.EscalatedAt)
		}
	}
	if first := items[0]; first.ContentClass != "e2e_gate" {
		t.Errorf("first item %+v, want the human-gate review (highest priority left)", first)
	}
	if got := srv.queue(t, "?limit=2"); len(got) != 2 || got[0].ReviewID != items[0].ReviewID {
		t.Errorf("limit=2 gave %+v", got)
	}
	for _, q := range []string{"?limit=0", "?limit=1001", "?limit=ten"} {
		if pr := srv.expectProblem(t, http.StatusBadRequest, http.MethodGet, "/v1/manual-queue"+q, tokModerator, nil); pr.Field != "limit" {
			t.Errorf("%s: problem %+v does not name limit", q, pr)
		}
	}
	for _, q := range []string{"?window=forever", "?window=-1h"} {
		if pr := srv.expectProblem(t, http.StatusBadRequest, http.MethodGet, "/v1/slo"+q, tokAuditor, nil); pr.Field != "window" {
			t.Errorf("%s: problem %+v does not name window", q, pr)
		}
	}
	srv.expectProblem(t, http.StatusNotFound, http.MethodGet, "/v1/reviews/e2e-never-submitted/events", tokAuditor, nil)
	srv.expectProblem(t, http.StatusNotFound, http.MethodPost, "/v1/manual-queue/e2e-never-submitted/claim", tokModerator, nil)
	srv.expectProblem(t, http.StatusNotFound, http.MethodPost, "/v1/reviews/e2e-never-submitted/decision", tokModerator,
		map[string]any{"state": "accepted", "expected_version": 3})

	// Claiming again renews one's own lease.
	id := items[0].ReviewID
	srv.expect(t, http.StatusOK, http.MethodPost, "/v1/manual-queue/"+id+"/claim", tokModerator2, nil)
	srv.expect(t, http.StatusOK, http.MethodPost, "/v1/manual-queue/"+id+"/claim", tokModerator2, nil)
	srv.expectProblem(t, http.StatusConflict, http.MethodPost, "/v1/manual-queue/"+id+"/claim", tokModerator, nil)

	if ct := srv.expect(t, http.StatusOK, http.MethodGet, "/", "", nil).Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
		t.Errorf("GET / answered Content-Type %q, want HTML", ct)
	}
	srv.expect(t, http.StatusOK, http.MethodGet, "/readyz", "", nil)
	metrics := string(srv.expect(t, http.StatusOK, http.MethodGet, "/metrics", "", nil).Body)
	for _, want := range []string{"# TYPE ", "reviewledger_"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// No label per review (unbounded series) and no content.
	for _, never := range []string{contentMarker, "e2e-submit-0001", "e2e-timeouts-0001", "mona"} {
		if strings.Contains(metrics, never) {
			t.Errorf("/metrics contains %q", never)
		}
	}
	var doc map[string]any
	if err := json.Unmarshal(srv.expect(t, http.StatusOK, http.MethodGet, "/openapi.json", "", nil).Body, &doc); err != nil || doc["paths"] == nil {
		t.Errorf("/openapi.json is not an OpenAPI document: %v", err)
	}
}
