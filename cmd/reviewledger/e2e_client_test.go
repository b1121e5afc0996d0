package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
)

// e2eClient is the HTTP client of the tests, as a client of docs/contracts.md §2.
var e2eClient = &http.Client{Timeout: e2eWait}

// response is an HTTP answer read whole.
type response struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r response) String() string { return fmt.Sprintf("HTTP %d %s", r.Status, r.Body) }

// call sends a request with an optional bearer token and body (a []byte
// is sent as is, an io.Reader chunked, anything else as JSON).
func (p *serveProc) call(t testing.TB, method, path, token string, body any) response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case io.Reader: // no length known: sent chunked
		rd = b
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, p.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := e2eClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return response{Status: res.StatusCode, Header: res.Header, Body: raw}
}

// expect calls and fails unless the answer has status want.
func (p *serveProc) expect(t testing.TB, want int, method, path, token string, body any) response {
	t.Helper()
	res := p.call(t, method, path, token, body)
	if res.Status != want {
		t.Fatalf("%s %s: %s, want %d", method, path, res, want)
	}
	return res
}

func decode[T any](t testing.TB, res response) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(res.Body, &v); err != nil {
		t.Fatalf("decode %s: %v", res, err)
	}
	return v
}

// problem is an RFC 9457 body as a client reads it.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Field  string `json:"field"`
}

// expectProblem calls, and checks the answer is a problem body with status
// want: application/problem+json with type, title and a matching status.
func (p *serveProc) expectProblem(t testing.TB, want int, method, path, token string, body any) problem {
	t.Helper()
	res := p.expect(t, want, method, path, token, body)
	return checkProblem(t, res, want)
}

func checkProblem(t testing.TB, res response, want int) problem {
	t.Helper()
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		t.Errorf("%s: Content-Type %q, want application/problem+json", res, ct)
	}
	pr := decode[problem](t, res)
	if pr.Type == "" || pr.Title == "" || pr.Status != want {
		t.Errorf("problem body %s: want type, title and status %d", res.Body, want)
	}
	return pr
}

// reviewView is GET /v1/reviews/{id} (docs/contracts.md §2).
type reviewView struct {
	ReviewID     string     `json:"review_id"`
	State        string     `json:"state"`
	ContentClass string     `json:"content_class"`
	Attempts     int        `json:"attempts"`
	Version      uint64     `json:"version"`
	SubmittedAt  time.Time  `json:"submitted_at"`
	Deadline     time.Time  `json:"deadline"`
	DecidedAt    *time.Time `json:"decided_at"`
	Reasons      []string   `json:"reasons"`
	// DecidedByProvider is the extension naming the deciding provider.
	DecidedByProvider string `json:"decided_by_provider"`
}

type eventView struct {
	Version    uint64          `json:"version"`
	Type       string          `json:"type"`
	RecordedAt time.Time       `json:"recorded_at"`
	Data       json.RawMessage `json:"data"`
}

// field returns a top-level field of the event's data, as JSON decodes it.
func (e eventView) field(name string) any {
	var m map[string]any
	_ = json.Unmarshal(e.Data, &m)
	return m[name]
}

type eventsView struct {
	ReviewID string      `json:"review_id"`
	Events   []eventView `json:"events"`
}

type queueItem struct {
	ReviewID       string     `json:"review_id"`
	ContentClass   string     `json:"content_class"`
	Reason         string     `json:"reason"`
	Attempts       int        `json:"attempts"`
	EscalatedAt    time.Time  `json:"escalated_at"`
	AgeSeconds     float64    `json:"age_seconds"`
	ClaimedBy      *string    `json:"claimed_by"`
	ClaimExpiresAt *time.Time `json:"claim_expires_at"`
}

type sloView struct {
	Total                  int64   `json:"total"`
	CompletedWithinBudget  int64   `json:"completed_within_budget"`
	WithinBudgetRatio      float64 `json:"within_budget_ratio"`
	Escalated              int64   `json:"escalated"`
	ConflictingCompletions int64   `json:"conflicting_completions"`
	LatencyMS              struct {
		P50 float64 `json:"p50"`
		P90 float64 `json:"p90"`
		P99 float64 `json:"p99"`
	} `json:"latency_ms"`
	ManualQueue struct {
		Depth            int64   `json:"depth"`
		OldestAgeSeconds float64 `json:"oldest_age_seconds"`
	} `json:"manual_queue"`
}

func submitBody(id, class, content string) map[string]any {
	return map[string]any{"review_id": id, "content_class": class, "content_type": "text/plain", "content": content}
}

// submit submits a new review and fails unless it is accepted (202).
func (p *serveProc) submit(t testing.TB, id, class, content string) reviewView {
	t.Helper()
	return decode[reviewView](t, p.expect(t, http.StatusAccepted, http.MethodPost, "/v1/reviews", tokSubmitter, submitBody(id, class, content)))
}

func (p *serveProc) review(t testing.TB, id string) reviewView {
	t.Helper()
	return decode[reviewView](t, p.expect(t, http.StatusOK, http.MethodGet, "/v1/reviews/"+id, tokSubmitter, nil))
}

func (p *serveProc) events(t testing.TB, id string) []eventView {
	t.Helper()
	v := decode[eventsView](t, p.expect(t, http.StatusOK, http.MethodGet, "/v1/reviews/"+id+"/events", tokAuditor, nil))
	if v.ReviewID != id {
		t.Fatalf("events of %s name review %q", id, v.ReviewID)
	}
	return v.Events
}

func (p *serveProc) queue(t testing.TB, query string) []queueItem {
	t.Helper()
	v := decode[struct {
		Items []queueItem `json:"items"`
	}](t, p.expect(t, http.StatusOK, http.MethodGet, "/v1/manual-queue"+query, tokModerator, nil))
	return v.Items
}

func queued(items []queueItem, id string) (queueItem, bool) {
	for _, it := range items {
		if it.ReviewID == id {
			return it, true
		}
	}
	return queueItem{}, false
}

// waitSettled polls the review until it leaves pending and returns it.
func (p *serveProc) waitSettled(t testing.TB, id string) reviewView {
	t.Helper()
	var v reviewView
	clocktest.EventuallyShows(t, "review "+id+" to leave pending", func() (bool, string) {
		v = p.review(t, id)
		return v.State != "pending", fmt.Sprintf("%+v", v)
	})
	return v
}

// waitQueued polls the manual queue until the review is in it.
func (p *serveProc) waitQueued(t testing.TB, id, class string) queueItem {
	t.Helper()
	var it queueItem
	clocktest.EventuallyShows(t, "review "+id+" to reach the manual queue", func() (bool, string) {
		var ok bool
		it, ok = queued(p.queue(t, "?content_class="+class+"&limit=1000"), id)
		return ok, "not in the queue"
	})
	return it
}

// waitUnqueued polls the manual queue until the review has left it.
func (p *serveProc) waitUnqueued(t testing.TB, id, class string) {
	t.Helper()
	clocktest.EventuallyShows(t, "review "+id+" to leave the manual queue", func() (bool, string) {
		it, ok := queued(p.queue(t, "?content_class="+class+"&limit=1000"), id)
		return !ok, fmt.Sprintf("still queued: %+v", it)
	})
}

// eventTypes lists the events' types in order.
func eventTypes(evs []eventView) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

func ofType(evs []eventView, typ string) []eventView {
	var out []eventView
	for _, e := range evs {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

// keys returns the sorted keys of a JSON object.
func keys(t testing.TB, raw []byte) []string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("not a JSON object: %s", raw)
	}
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// hasKeys fails unless the JSON object has every key of want.
func hasKeys(t testing.TB, what string, raw []byte, want ...string) {
	t.Helper()
	got := keys(t, raw)
	for _, k := range want {
		if !slices.Contains(got, k) {
			t.Errorf("%s lacks %q: %s", what, k, raw)
		}
	}
}

func reviewIDf(format string, args ...any) string { return fmt.Sprintf(format, args...) }
