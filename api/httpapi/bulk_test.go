package httpapi

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/reviewledger/reviewledger/domain"
)

func (h *harness) bulk(path, token, body string) bulkView {
	h.t.Helper()
	rec := h.do("POST", path, token, body)
	if rec.Code != http.StatusOK {
		h.t.Fatalf("%s %s: %d %s", path, body, rec.Code, rec.Body)
	}
	wantKeys(h.t, keys(h.t, rec.Body.Bytes()), "dry_run", "total", "counts", "items", "next_cursor")
	return decode[bulkView](h.t, rec)
}

func outcomes(v bulkView) string {
	var out []string
	for _, it := range v.Items {
		out = append(out, it.ReviewID+":"+it.Outcome)
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

func TestBulkRequeue(t *testing.T) {
	h := newDBHarness(t)
	for i := range 5 {
		h.submit(fmt.Sprintf("out-%d", i), "caption_suggestion", "x")
		h.escalate(fmt.Sprintf("out-%d", i), domain.ReasonBudgetExhausted)
	}
	h.submit("refused", "caption_suggestion", "x")
	h.escalate("refused", domain.ReasonProviderRefused)
	h.submit("import", "transcript_import", "x")
	h.escalate("import", domain.ReasonBudgetExhausted)
	h.submit("pending", "caption_suggestion", "x")
	h.do("POST", "/v1/manual-queue/out-4/claim", moderator2, "")
	h.catchUp()
	const path = "/v1/manual-queue/bulk/requeue"
	filter := `"filter":{"content_class":"caption_suggestion","reason":"budget_exhausted"}`

	// A dry run counts and changes nothing.
	v := h.bulk(path, moderatorToken, `{`+filter+`,"dry_run":true}`)
	if !v.DryRun || v.Total != 5 || len(v.Items) != 0 || v.NextCursor != nil || len(h.runner.requeued) != 0 {
		t.Fatalf("dry run %+v", v)
	}
	// A member the body does not know is refused, naming it, before
	// anything is selected: a misspelt dry_run or filter key must not
	// turn a count into a requeue of the whole queue.
	for body, field := range map[string]string{
		`{"filter":{},"dryRun":true}`:                                     "dryRun",
		`{"filter":{"contentclass":"caption_suggestion"},"dry_run":true}`: "filter.contentclass",
		`{"filter":{"content_class":"caption_suggestion","reasons":"x"}}`: "filter.reasons",
		`{"filter":{},"cursor":"` + strings.Repeat("c", 129) + `"}`:       "cursor",
		`{"filter":{"reason":"` + strings.Repeat("r", 65) + `"}}`:         "filter.reason",
	} {
		wantProblem(t, h.do("POST", path, moderatorToken, body), http.StatusBadRequest, "invalid-request", field)
	}
	if len(h.runner.requeued) != 0 {
		t.Fatalf("a refused bulk body requeued %v", h.runner.requeued)
	}
	// Pages of two, in review ID order, until next_cursor is null.
	var all []string
	cursor := ""
	for page := 0; ; page++ {
		v = h.bulk(path, moderatorToken, fmt.Sprintf(`{%s,"limit":2,"cursor":%q,"note":"provider back"}`, filter, cursor))
		if page == 0 && v.Total != 5 {
			t.Fatalf("total %d on the first page", v.Total)
		}
		all = append(all, outcomes(v))
		if v.NextCursor == nil {
			break
		}
		cursor = *v.NextCursor
	}
	if got := strings.Join(all, " | "); got != "out-0:requeued out-1:requeued | out-2:requeued out-3:requeued | out-4:claimed" {
		t.Fatalf("pages %s", got)
	}
	if len(h.runner.requeued) != 4 {
		t.Fatalf("requeued %v", h.runner.requeued)
	}
	for _, it := range v.Items {
		if it.Detail == "" || !contains(it.Detail, "max") {
			t.Fatalf("claimed item without the holder: %+v", it)
		}
	}
	// By ID, with the versions seen: stale is a conflict, decided or
	// pending moved on, unknown not found.
	stale := h.version("refused") - 1
	body := fmt.Sprintf(`{"items":[{"review_id":"refused","expected_version":%d},{"review_id":"import"},{"review_id":"out-0"},{"review_id":"pending"},{"review_id":"ghost"}]}`, stale)
	h.catchUp() // the projection sees out-0 requeued
	v = h.bulk(path, moderatorToken, `{"dry_run":true,`+body[1:])
	if v.Total != 2 { // refused and import are in the queue
		t.Fatalf("dry run by ID: %+v", v)
	}
	before := h.checkpoints()
	v = h.bulk(path, moderatorToken, body)
	if after := h.checkpoints(); after != before {
		t.Fatalf("a bulk action moved the projections' checkpoints: %s, then %s", before, after)
	}
	if got := outcomes(v); got != "ghost:not_found import:requeued out-0:moved_on pending:moved_on refused:conflict" {
		t.Fatalf("by ID: %s", got)
	}
	if v.Counts[OutcomeRequeued] != 1 || v.Counts[OutcomeMovedOn] != 2 || v.Counts[OutcomeConflict] != 1 || v.Counts[OutcomeNotFound] != 1 || v.NextCursor != nil {
		t.Fatalf("counts %+v", v.Counts)
	}
	for _, it := range v.Items {
		if (it.Outcome == OutcomeRequeued) != (it.Version != nil) {
			t.Fatalf("item %+v", it)
		}
	}

	for _, tc := range []struct {
		name, body, kind, field string
		status                  int
	}{
		{"neither", `{"note":"x"}`, "invalid-request", "filter", 400},
		{"both", `{"filter":{},"items":[{"review_id":"a"}]}`, "invalid-request", "filter", 400},
		{"no items", `{"items":[]}`, "invalid-request", "items", 400},
		{"bad ID", `{"items":[{"review_id":"a/b"}]}`, "invalid-review-id", "items[0].review_id", 400},
		{"ID twice", `{"items":[{"review_id":"a"},{"review_id":"a"}]}`, "invalid-request", "items[1].review_id", 400},
		{"limit 0", `{"filter":{},"limit":0}`, "invalid-request", "limit", 400},
		{"limit too big", `{"filter":{},"limit":1001}`, "invalid-request", "limit", 400},
		{"claimed_by on requeue", `{"filter":{"claimed_by":"max"}}`, "invalid-request", "filter.claimed_by", 400},
		{"unknown class", `{"filter":{"content_class":"podcast"}}`, "unknown-class", "filter.content_class", 422},
		{"malformed", `{`, "invalid-request", "body", 400},
		{"filter not an object", `{"filter":3}`, "invalid-request", "filter", 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantProblem(t, h.do("POST", path, moderatorToken, tc.body), tc.status, tc.kind, tc.field)
		})
	}
	wantProblem(t, h.do("POST", path, auditorToken, `{"filter":{}}`), http.StatusForbidden, "forbidden", "")
	big := newDBHarness(t, func(c *Config, _ *Deps) { c.MaxBodyBytes = 32 })
	wantProblem(t, big.do("POST", path, moderatorToken, `{"filter":{},"note":"`+strings.Repeat("n", 64)+`"}`), http.StatusRequestEntityTooLarge, "body-too-large", "")
	// Nothing was written by the refusals, and no checkpoint moved: the
	// bulk route only appends to the ledger.
	if n := len(h.runner.requeued); n != 5 {
		t.Fatalf("requeued %d", n)
	}
}

func TestBulkRelease(t *testing.T) {
	h := newDBHarness(t)
	for _, id := range []string{"a", "b", "c"} {
		h.submit(id, "caption_suggestion", "x")
		h.escalate(id, domain.ReasonBudgetExhausted)
	}
	h.do("POST", "/v1/manual-queue/a/claim", moderatorToken, "")
	h.do("POST", "/v1/manual-queue/b/claim", moderator2, "")
	h.catchUp()
	const path = "/v1/manual-queue/bulk/release"
	if v := h.bulk(path, moderatorToken, `{"filter":{"claimed_by":"mona"},"dry_run":true}`); v.Total != 1 {
		t.Fatalf("dry run %+v", v)
	}
	v := h.bulk(path, moderatorToken, `{"filter":{}}`)
	if got := outcomes(v); got != "a:released b:claimed c:not_claimed" {
		t.Fatalf("mona releases: %s", got)
	}
	v = h.bulk(path, adminToken, `{"items":[{"review_id":"b"},{"review_id":"ghost"}]}`)
	if got := outcomes(v); got != "b:released ghost:not_found" {
		t.Fatalf("admin releases: %s", got)
	}
	rv, _ := h.ledger.Load(t.Context(), "b")
	if rv.CurrentClaim() != nil {
		t.Fatal("b still claimed")
	}
	wantProblem(t, h.do("POST", path, moderatorToken, `{"filter":{"claimed_by":"`+strings.Repeat("x", 300)+`"}}`), http.StatusBadRequest, "invalid-request", "filter.claimed_by")
}

// checkpoints are the projections' checkpoints, as text.
func (h *harness) checkpoints() string {
	h.t.Helper()
	var s string
	if err := h.pool.QueryRow(h.t.Context(), `SELECT string_agg(name || '=' || events::text, ',' ORDER BY name) FROM projection_checkpoint`).Scan(&s); err != nil {
		h.t.Fatal(err)
	}
	return s
}
