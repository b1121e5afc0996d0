package uitest

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/reviewledger/reviewledger/api/view"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/projections"
)

// FakeAPI is an in-memory stand-in for the docs/contracts.md §2 routes the page uses,
// answering with their exact JSON shapes and problem+json errors. It lets
// the browser tests run without the real server; package httpapi's contract
// test (api/httpapi/uicontract_test.go) checks it against the real server.
type FakeAPI struct {
	mu       sync.Mutex
	now      func() time.Time
	tokens   map[string]fakePrincipal
	reviews  map[string]*fakeReview
	queue    []string // review IDs in queue order
	slo      map[string]SLOJSON
	requests []FakeRequest
	reqSeq   int
	// The stream of queue changes (GET /v1/manual-queue/events).
	changes []fakeChange
	changed chan struct{} // closed and replaced on every change
	streams streamControl
	// GET /v1/slo/providers and its series: the figures per provider and
	// class, and whether the routes answer 503 as without read models.
	providers     []projections.ProviderSLO
	providersDown bool
	// The policy's classes: a content_class not among them answers 422
	// (any class is taken while it is empty).
	classes []string
}

type fakePrincipal struct{ role, name string }

// FakeRequest is one request the fake received.
type FakeRequest struct {
	Method, Path string
	Query        url.Values
	Auth         string
	Body         string
	LastEventID  string
}

type fakeReview struct {
	view      ReviewJSON
	item      queueItemJSON
	approvals int // moderators who must agree
	votes     []string
	events    []EventJSON
	// settled is the version of the last event that is not a claim, a
	// release or a hold.
	settled uint64
	// The timeline entries of claims, releases and holds.
	coord []timelineEntry
	// raceRequeue: a vote lands just before the next requeue is applied.
	raceRequeue bool
	// The submitted content; purged answers 410 as after retention.
	contentType string
	content     []byte
	purged      bool
}

// rawBody is an answer that is not JSON: the bytes of GET
// /v1/reviews/{id}/content with their headers.
type rawBody struct {
	header http.Header
	body   []byte
}

// The wire shapes of docs/contracts.md §2.

// ReviewJSON is the body of GET /v1/reviews/{id}: the server's own type.
type ReviewJSON = view.Review

// queueItemJSON is an item of GET /v1/manual-queue: the server's own type.
type queueItemJSON = projections.QueueItem

// EventJSON is one event of GET /v1/reviews/{id}/events.
type EventJSON struct {
	Version    uint64         `json:"version"`
	Type       string         `json:"type"`
	RecordedAt time.Time      `json:"recorded_at"`
	Data       map[string]any `json:"data"`
	// Policy is the class's policy, on a Submitted.
	Policy map[string]any `json:"policy,omitempty"`
}

// SLOJSON is the body of GET /v1/slo. The fake fills in from, to and
// content_class as the request asks.
type SLOJSON = projections.SLOSummary

type problemJSON struct {
	Type      string `json:"type"`
	Title     string `json:"title"`
	Status    int    `json:"status"`
	Detail    string `json:"detail,omitempty"`
	Field     string `json:"field,omitempty"`
	RequestID string `json:"request_id"`
}

const claimLease = 10 * time.Minute

// NewFakeAPI returns a fake with no tokens, reviews or figures, reading
// the time from now.
func NewFakeAPI(now func() time.Time) *FakeAPI {
	return &FakeAPI{
		now:     now,
		tokens:  map[string]fakePrincipal{},
		reviews: map[string]*fakeReview{},
		slo:     map[string]SLOJSON{},
		changed: make(chan struct{}),
	}
}

// AddToken lets token sign in as name with role.
func (f *FakeAPI) AddToken(token, role, name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tokens[token] = fakePrincipal{role: role, name: name}
}

// Revoke makes token unknown, as a token removed from the server's
// configuration is.
func (f *FakeAPI) Revoke(token string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.tokens, token)
}

// SetSLO sets what GET /v1/slo answers for window (as "1h"); a window
// never set answers 400.
func (f *FakeAPI) SetSLO(window string, s SLOJSON) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.slo[window] = s
}

// SetClasses names the policy's content classes: a content_class query
// naming another answers 422 unknown-class, as the real server's does
// with Config.Classes set. Without it, any class is taken.
func (f *FakeAPI) SetClasses(names ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.classes = slices.Clone(names)
}

// classProblem is the 422 of a content_class query the policy does not
// name, or 0 and nil; f.mu is held.
func (f *FakeAPI) classProblem(r *http.Request) (int, any) {
	class := r.URL.Query().Get("content_class")
	if class == "" || len(f.classes) == 0 || slices.Contains(f.classes, class) {
		return 0, nil
	}
	return problem(http.StatusUnprocessableEntity, "unknown-class", "Unknown content class",
		fmt.Sprintf("content class %q is not in the policy (%s)", class, strings.Join(f.classes, ", ")), "content_class")
}

// SetProviders sets the figures GET /v1/slo/providers answers with (and
// its series follows), sorted by provider and class as the real server
// sorts them.
func (f *FakeAPI) SetProviders(ps []projections.ProviderSLO) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.providers = slices.Clone(ps)
	slices.SortFunc(f.providers, func(a, b projections.ProviderSLO) int {
		return cmp.Or(cmp.Compare(a.Provider, b.Provider), cmp.Compare(a.ContentClass, b.ContentClass))
	})
}

// SetProvidersDown makes both provider routes answer 503 not-ready, as
// the real server does without read models.
func (f *FakeAPI) SetProvidersDown(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.providersDown = down
}

// Escalate adds a review in manual_review to the queue, escalated age ago
// after the given number of attempts.
func (f *FakeAPI) Escalate(id, class, reason string, attempts int, age time.Duration, approvals int, reasons []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now().UTC()
	escalatedAt := now.Add(-age)
	submitted := escalatedAt.Add(-20 * time.Second)
	r := &fakeReview{approvals: approvals}
	content := []byte("content of " + id)
	sum := sha256.Sum256(content)
	r.record(submitted, "Submitted", map[string]any{"review_id": id, "content_class": class, "content_type": "text/plain; charset=utf-8",
		"payload_digest": "sha256:" + hex.EncodeToString(sum[:]), "payload_bytes": len(content), "policy_digest": "sha256:0f1e",
		"submitted_at": submitted, "deadline": submitted.Add(30 * time.Second), "submitted_by": "app"})
	r.events[0].Policy = map[string]any{"budget_ms": 30000, "attempt_timeout_ms": 10000, "max_attempts": 3, "backoff_initial_ms": 100,
		"backoff_max_ms": 2000, "backoff_jitter_ms": 75, "on_exhaustion": "manual_review", "human_gate": reason == "human_gate",
		"priority": 1, "approvals": approvals}
	for i := 1; i <= attempts; i++ {
		at := submitted.Add(time.Duration(i) * 5 * time.Second)
		r.record(at, "AttemptStarted", map[string]any{"review_id": id, "attempt": i, "attempt_timeout_ms": 10000, "remaining_budget_ms": 30000 - i*5000})
		r.record(at.Add(4*time.Second), "AttemptTimedOut", map[string]any{"review_id": id, "attempt": i, "classification": "deadline_exceeded", "elapsed_ms": 4000})
	}
	r.record(escalatedAt, "Escalated", map[string]any{"review_id": id, "reason": reason, "state": "manual_review", "attempts": attempts, "at": escalatedAt})
	if reasons == nil {
		reasons = []string{}
	}
	r.view = ReviewJSON{
		ReviewID: id, State: "manual_review", ContentClass: class, Attempts: attempts,
		Version: uint64(len(r.events) - 1), SubmittedAt: submitted, Deadline: submitted.Add(30 * time.Second),
		Reasons: reasons,
	}
	r.item = queueItemJSON{ReviewID: id, ContentClass: class, Reason: reason, Attempts: attempts, EscalatedAt: escalatedAt,
		Priority: 1, RequiredApprovals: max(approvals, 1), Version: r.view.Version, Round: 1, Claims: "optional"}
	r.contentType, r.content = "text/plain; charset=utf-8", content
	f.reviews[id] = r
	f.queue = append(f.queue, id)
	f.emit("added", id, "system", map[string]any{"item": f.itemNow(r, now)})
}

// ClaimAs makes moderator hold the claim on id until then.
func (f *FakeAPI) ClaimAs(id, moderator string, until time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.reviews[id]
	r.item.ClaimedBy, r.item.ClaimExpiresAt = &moderator, &until
	r.coordinate(f.now().UTC(), "claimed", moderator, map[string]any{"expires_at": until})
	f.emit("claimed", id, moderator, map[string]any{"claimed_by": moderator, "claim_expires_at": until})
}

// Vote records another moderator's approval on id, moving its version: a
// page that read the review before now holds a stale version.
func (f *FakeAPI) Vote(id, moderator string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.reviews[id]
	r.votes = append(r.votes, moderator)
	r.record(f.now().UTC(), "ManualApprovalRecorded", map[string]any{"review_id": id, "state": "accepted", "moderator": moderator})
	r.view.Version++
	r.item.Version = r.view.Version
	f.emit("approved", id, moderator, map[string]any{"moderator": moderator, "state": "accepted"})
}

// SetContent replaces what was submitted for id.
func (f *FakeAPI) SetContent(id, contentType string, content []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.reviews[id]
	r.contentType, r.content, r.purged = contentType, content, false
}

// Purge drops id's content, as retention does.
func (f *FakeAPI) Purge(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reviews[id].purged = true
}

// Review returns id's review as GET /v1/reviews/{id} answers it.
func (f *FakeAPI) Review(id string) ReviewJSON {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reviews[id].view
}

// LastEvent returns the last event of id's stream.
func (f *FakeAPI) LastEvent(id string) EventJSON {
	f.mu.Lock()
	defer f.mu.Unlock()
	ev := f.reviews[id].events
	return ev[len(ev)-1]
}

// Requests returns every request received, in order.
func (f *FakeAPI) Requests() []FakeRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.requests)
}

// RequestsTo returns the requests received for a method and path.
func (f *FakeAPI) RequestsTo(method, path string) []FakeRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []FakeRequest
	for _, r := range f.requests {
		if r.Method == method && r.Path == path {
			out = append(out, r)
		}
	}
	return out
}

// record appends an event that changes the review (not a claim, a release
// or a hold: coordinate).
func (r *fakeReview) record(at time.Time, typ string, data map[string]any) {
	r.events = append(r.events, EventJSON{Version: uint64(len(r.events)), Type: typ, RecordedAt: at, Data: data})
	r.settled = uint64(len(r.events) - 1)
}

// current reports whether a request made on version expected may act on
// the review: only claims, releases and holds were recorded since, as the
// real server checks it (domain.Review.Current).
func (r *fakeReview) current(expected uint64) bool {
	return expected >= r.settled && expected <= r.view.Version
}

// Handler serves the fake's API routes (and nothing else: package ui's
// tests mount ui.Handler beside it, as the real server does).
func (f *FakeAPI) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/manual-queue", f.route([]string{"moderator"}, f.manualQueue))
	mux.HandleFunc("POST /v1/manual-queue/{id}/claim", f.route([]string{"moderator"}, f.claim))
	mux.HandleFunc("GET /v1/reviews/{id}", f.route([]string{"submitter", "moderator", "auditor"}, f.getReview))
	mux.HandleFunc("GET /v1/reviews/{id}/events", f.route([]string{"auditor"}, f.events))
	mux.HandleFunc("GET /v1/reviews/{id}/content", f.route([]string{"moderator"}, f.contentOf))
	mux.HandleFunc("POST /v1/reviews/{id}/decision", f.route([]string{"moderator"}, f.decide))
	mux.HandleFunc("GET /v1/slo", f.route([]string{"auditor", "moderator"}, f.sloSummary))
	mux.HandleFunc("GET /v1/slo/series", f.route([]string{"auditor", "moderator"}, f.sloSeries))
	mux.HandleFunc("GET /v1/slo/attempts", f.route([]string{"auditor", "moderator"}, f.sloAttempts))
	mux.HandleFunc("GET /v1/slo/providers", f.route([]string{"auditor", "moderator"}, f.sloProviders))
	mux.HandleFunc("GET /v1/slo/providers/series", f.route([]string{"auditor", "moderator"}, f.sloProviderSeries))
	mux.HandleFunc("GET /v1/me", f.route([]string{"submitter", "moderator", "auditor"}, f.me))
	f.moderationRoutes(mux)
	return mux
}

type fakeHandler func(w http.ResponseWriter, r *http.Request, who fakePrincipal, body []byte) (int, any)

// route logs the request, checks the bearer token and role, and writes the
// handler's answer as JSON (a problemJSON as problem+json).
func (f *FakeAPI) route(roles []string, h fakeHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var body []byte
		if r.Body != nil {
			body, _ = io.ReadAll(r.Body)
		}
		f.mu.Lock()
		f.reqSeq++
		reqID := fmt.Sprintf("req-%04d", f.reqSeq)
		f.requests = append(f.requests, FakeRequest{Method: r.Method, Path: r.URL.Path, Query: r.URL.Query(), Auth: r.Header.Get("Authorization"), Body: string(body)})
		token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		who, known := f.tokens[token]
		f.mu.Unlock()
		w.Header().Set("X-Request-Id", reqID)

		var status int
		var out any
		switch {
		case !known:
			status, out = problem(http.StatusUnauthorized, "unauthenticated", "Missing or invalid bearer token", "", "")
		case who.role != "admin" && !slices.Contains(roles, who.role):
			status, out = problem(http.StatusForbidden, "forbidden", "Role not allowed", "the "+who.role+" role cannot call "+r.Method+" "+r.URL.Path, "")
		case r.Pattern != "" && strings.Contains(r.Pattern, "{id}") && domain.ValidateReviewID(r.PathValue("id")) != nil:
			err := domain.ValidateReviewID(r.PathValue("id"))
			status, out = problem(http.StatusBadRequest, "invalid-review-id", "Invalid review ID", err.Error(), "review_id")
		default:
			status, out = h(w, r, who, body)
		}
		if p, ok := out.(problemJSON); ok {
			p.RequestID = reqID
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(status)
			_ = json.NewEncoder(w).Encode(p)
			return
		}
		if raw, ok := out.(rawBody); ok {
			for k, v := range raw.header {
				w.Header()[k] = v
			}
			w.WriteHeader(status)
			_, _ = w.Write(raw.body)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(out)
	}
}

// decodeBody reads a JSON object body into v as the real server does:
// 400 invalid-request naming "body" when it is empty or not a JSON object,
// naming the member whose value has the wrong type. ok is false with the
// problem to answer.
func decodeBody(body []byte, v any) (status int, prob any, ok bool) {
	if len(bytes.TrimSpace(body)) == 0 {
		status, prob = problem(http.StatusBadRequest, "invalid-request", "Invalid request", "body: is empty; a JSON object is required", "body")
		return status, prob, false
	}
	if err := json.Unmarshal(body, v); err != nil {
		field, detail := "body", "body: malformed JSON: "+err.Error()
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			field, detail = te.Field, te.Field+": must be a JSON "+te.Type.Kind().String()
		}
		status, prob = problem(http.StatusBadRequest, "invalid-request", "Invalid request", detail, field)
		return status, prob, false
	}
	return 0, nil, true
}

func problem(status int, kind, title, detail, field string) (int, any) {
	return status, problemJSON{Type: "urn:reviewledger:problem:" + kind, Title: title, Status: status, Detail: detail, Field: field}
}

func (f *FakeAPI) manualQueue(_ http.ResponseWriter, r *http.Request, _ fakePrincipal, _ []byte) (int, any) {
	class := r.URL.Query().Get("content_class")
	f.mu.Lock()
	status, prob := f.classProblem(r)
	f.mu.Unlock()
	if status != 0 {
		return status, prob
	}
	reason := r.URL.Query().Get("reason")
	held := r.URL.Query().Get("held")
	if held != "" && held != "true" && held != "false" && held != "any" {
		return problem(http.StatusBadRequest, "invalid-request", "Invalid request", "held must be true, false or any", "held")
	}
	order := r.URL.Query().Get("order")
	if order != "" && order != "priority" && order != "due" {
		return problem(http.StatusBadRequest, "invalid-request", "Invalid request", "order must be priority or due", "order")
	}
	limit := 100
	if q := r.URL.Query().Get("limit"); q != "" {
		if _, err := fmt.Sscan(q, &limit); err != nil || limit < 1 || limit > 1000 {
			return problem(http.StatusBadRequest, "invalid-request", "Invalid request", "limit must be an integer from 1 to 1000", "limit")
		}
	}
	if len(reason) > 64 {
		return problem(http.StatusBadRequest, "invalid-request", "Invalid request", "reason: longer than 64 characters", "reason")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now().UTC()
	ids := slices.Clone(f.queue)
	if order == "due" {
		slices.SortStableFunc(ids, func(a, b string) int {
			da, db := f.reviews[a].item.DueAt, f.reviews[b].item.DueAt
			switch {
			case da == nil && db == nil:
				return 0
			case da == nil:
				return 1
			case db == nil:
				return -1
			}
			return da.Compare(*db)
		})
	}
	items := []queueItemJSON{}
	for _, id := range ids {
		it := f.itemNow(f.reviews[id], now)
		if (class != "" && it.ContentClass != class) || (reason != "" && it.Reason != reason) {
			continue
		}
		if (held == "" || held == "false") && it.Held || held == "true" && !it.Held {
			continue
		}
		items = append(items, it)
		if len(items) == limit {
			break
		}
	}
	return http.StatusOK, map[string]any{"items": items, "now": now}
}

// itemNow is a queue item as read at now: its age, its claim unless it
// ran out, whether its SLA is breached.
func (f *FakeAPI) itemNow(r *fakeReview, now time.Time) queueItemJSON {
	it := r.item
	it.AgeSeconds = math.Max(0, math.Round(now.Sub(it.EscalatedAt).Seconds()*1000)/1000)
	if it.ClaimExpiresAt != nil && !it.ClaimExpiresAt.After(now) {
		it.ClaimedBy, it.ClaimExpiresAt = nil, nil
	}
	it.SLABreached = it.DueAt != nil && !it.DueAt.After(now)
	it.Approvers = append([]string{}, r.votes...)
	return it
}

func (f *FakeAPI) claim(_ http.ResponseWriter, r *http.Request, who fakePrincipal, _ []byte) (int, any) {
	id := r.PathValue("id")
	f.mu.Lock()
	defer f.mu.Unlock()
	rv, ok := f.reviews[id]
	switch {
	case !ok:
		return problem(http.StatusNotFound, "review-not-found", "Review not found", "", "")
	case !slices.Contains(f.queue, id):
		return problem(http.StatusConflict, "not-in-manual-review", "Review is not in manual_review",
			"review is not in the manual queue", "")
	}
	now := f.now().UTC()
	it := &rv.item
	if it.ClaimedBy != nil && *it.ClaimedBy != who.name && it.ClaimExpiresAt.After(now) {
		return problem(http.StatusConflict, "claimed-by-other", "Claimed by another moderator",
			fmt.Sprintf("claimed by %s until %s", *it.ClaimedBy, it.ClaimExpiresAt.Format(time.RFC3339)), "")
	}
	name, until := who.name, now.Add(claimLease)
	it.ClaimedBy, it.ClaimExpiresAt = &name, &until
	rv.coordinate(now, "claimed", name, map[string]any{"expires_at": until})
	f.emit("claimed", id, name, map[string]any{"claimed_by": name, "claim_expires_at": until})
	return http.StatusOK, map[string]any{"review_id": id, "claimed_by": name, "claimed_at": now, "claim_expires_at": until, "version": rv.view.Version}
}

func (f *FakeAPI) getReview(_ http.ResponseWriter, r *http.Request, _ fakePrincipal, _ []byte) (int, any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rv, ok := f.reviews[r.PathValue("id")]
	if !ok {
		return problem(http.StatusNotFound, "review-not-found", "Review not found", "", "")
	}
	return http.StatusOK, rv.view
}

func (f *FakeAPI) events(_ http.ResponseWriter, r *http.Request, _ fakePrincipal, _ []byte) (int, any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rv, ok := f.reviews[r.PathValue("id")]
	if !ok {
		return problem(http.StatusNotFound, "review-not-found", "Review not found", "", "")
	}
	return http.StatusOK, map[string]any{"review_id": rv.view.ReviewID, "events": rv.events}
}

// contentOf is GET /v1/reviews/{id}/content, the extension of docs/contracts.md §2
// that shows moderators what they decide on, with the real route's headers.
func (f *FakeAPI) contentOf(_ http.ResponseWriter, r *http.Request, _ fakePrincipal, _ []byte) (int, any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rv, ok := f.reviews[r.PathValue("id")]
	switch {
	case !ok:
		return problem(http.StatusNotFound, "review-not-found", "Review not found", "", "")
	case rv.purged:
		return problem(http.StatusGone, "content-purged", "Content purged by retention", "", "")
	}
	sum := sha256.Sum256(rv.content)
	h := http.Header{}
	h.Set("Content-Type", rv.contentType)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Payload-Digest", "sha256:"+hex.EncodeToString(sum[:]))
	if strings.HasPrefix(rv.contentType, "text/") {
		h.Set("Content-Disposition", "inline")
	} else {
		h.Set("Content-Disposition", `attachment; filename="`+rv.view.ReviewID+`.bin"`)
	}
	return http.StatusOK, rawBody{header: h, body: slices.Clone(rv.content)}
}

func (f *FakeAPI) decide(_ http.ResponseWriter, r *http.Request, who fakePrincipal, body []byte) (int, any) {
	var in struct {
		State           string  `json:"state"`
		Note            string  `json:"note"`
		ExpectedVersion *uint64 `json:"expected_version"`
	}
	if status, prob, ok := decodeBody(body, &in); !ok {
		return status, prob
	}
	switch {
	case in.ExpectedVersion == nil:
		return problem(http.StatusBadRequest, "invalid-request", "Invalid request", "expected_version is required", "expected_version")
	case in.State != "accepted" && in.State != "rejected":
		return problem(http.StatusBadRequest, "invalid-decision", "Invalid decision", `state must be "accepted" or "rejected"`, "state")
	}
	id := r.PathValue("id")
	f.mu.Lock()
	defer f.mu.Unlock()
	rv, ok := f.reviews[id]
	switch {
	case !ok:
		return problem(http.StatusNotFound, "review-not-found", "Review not found", "", "")
	case rv.view.State != "manual_review":
		return problem(http.StatusConflict, "not-in-manual-review", "Review is not in manual_review", "", "")
	case !rv.current(*in.ExpectedVersion):
		return problem(http.StatusConflict, "version-moved", "Review version moved",
			fmt.Sprintf("expected version %d, the review is at %d", *in.ExpectedVersion, rv.view.Version), "")
	case slices.Contains(rv.votes, who.name):
		return problem(http.StatusConflict, "already-approved", "Moderator already approved this review", "", "")
	}
	now := f.now().UTC()
	if status, p, refused := f.claimRefusal(rv, who, now); refused {
		return status, p
	}
	if len(rv.votes)+1 < rv.approvals {
		rv.votes = append(rv.votes, who.name)
		rv.record(now, "ManualApprovalRecorded", map[string]any{"review_id": id, "state": in.State, "moderator": who.name, "note": in.Note})
		rv.view.Version++
		rv.item.Version = rv.view.Version
		f.emit("approved", id, who.name, map[string]any{"moderator": who.name, "state": in.State})
		return http.StatusOK, rv.view
	}
	rv.record(now, "ManualDecisionRecorded", map[string]any{"review_id": id, "state": in.State, "moderator": who.name, "note": in.Note})
	rv.view.Version++
	rv.view.State = in.State
	rv.view.DecidedAt = &now
	f.queue = slices.DeleteFunc(f.queue, func(q string) bool { return q == id })
	f.emit("decided", id, who.name, map[string]any{"moderator": who.name, "state": in.State})
	return http.StatusOK, rv.view
}

// The SLO routes' windows and steps, as the real server reads them.
const (
	defaultSLOWindow    = time.Hour      // GET /v1/slo, /v1/slo/providers
	defaultSeriesWindow = 24 * time.Hour // the series and GET /v1/slo/attempts
	maxSLOWindow        = 366 * 24 * time.Hour
	maxSeriesPoints     = 1440
)

// parseWindow reads the window query as the real server does: a Go
// duration or whole days ("7d"), positive and at most 366 days, def
// without one.
func parseWindow(q string, def time.Duration) (time.Duration, int, any) {
	if q == "" {
		return def, 0, nil
	}
	status, bad := problem(http.StatusBadRequest, "invalid-request", "Invalid request",
		fmt.Sprintf("window: must be a positive duration up to 366d such as 1h or 7d, got %q", q), "window")
	if days, ok := strings.CutSuffix(q, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 1 || n > 366 {
			return 0, status, bad
		}
		return time.Duration(n) * 24 * time.Hour, 0, nil
	}
	d, err := time.ParseDuration(q)
	if err != nil || d <= 0 || d > maxSLOWindow {
		return 0, status, bad
	}
	return d, 0, nil
}

// parseStep reads the step query of the series as the real server does:
// whole minutes or whole days, at most maxSeriesPoints steps over window;
// def without one.
func parseStep(q string, window, def time.Duration, now time.Time) (time.Duration, int, any) {
	if q == "" {
		return def, 0, nil
	}
	status, bad := problem(http.StatusBadRequest, "invalid-request", "Invalid request",
		fmt.Sprintf("step: must be a whole number of minutes such as 5m, 1h or 1d, got %q", q), "step")
	var d time.Duration
	if days, ok := strings.CutSuffix(q, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 1 || n > 366 {
			return 0, status, bad
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(q); err != nil || d < time.Minute || d%time.Minute != 0 {
			return 0, status, bad
		}
	}
	from := now.Add(-window).UTC().Truncate(d)
	if n := int(now.Sub(from)/d) + 1; n > maxSeriesPoints {
		status, bad = problem(http.StatusBadRequest, "invalid-request", "Invalid request",
			fmt.Sprintf("step: %s over %s makes %d points, more than %d: choose a longer step", d, window, n, maxSeriesPoints), "step")
		return 0, status, bad
	}
	return d, 0, nil
}

// sloSummary is GET /v1/slo: the figures set with SetSLO for the window
// asked for (as given, "" without one); a window never set answers 400.
func (f *FakeAPI) sloSummary(_ http.ResponseWriter, r *http.Request, _ fakePrincipal, _ []byte) (int, any) {
	q := r.URL.Query()
	window, status, prob := parseWindow(q.Get("window"), defaultSLOWindow)
	if status != 0 {
		return status, prob
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if status, prob := f.classProblem(r); status != 0 {
		return status, prob
	}
	s, ok := f.slo[q.Get("window")]
	if !ok {
		return problem(http.StatusBadRequest, "invalid-request", "Invalid request", "unknown window "+q.Get("window"), "window")
	}
	now := f.now().UTC()
	s.ContentClass, s.From, s.To = q.Get("content_class"), now.Add(-window).Truncate(time.Minute), now
	return http.StatusOK, s
}

// sloSeries is GET /v1/slo/series: twelve steps over the window, the
// within-budget ratio dipping in the middle, in the real body's shape.
func (f *FakeAPI) sloSeries(_ http.ResponseWriter, r *http.Request, _ fakePrincipal, _ []byte) (int, any) {
	q := r.URL.Query()
	window, status, prob := parseWindow(q.Get("window"), defaultSeriesWindow)
	if status != 0 {
		return status, prob
	}
	step, status, prob := parseStep(q.Get("step"), window, window/12, f.now())
	if status != 0 {
		return status, prob
	}
	f.mu.Lock()
	status, prob = f.classProblem(r)
	f.mu.Unlock()
	if status != 0 {
		return status, prob
	}
	from := f.now().Add(-window).UTC().Truncate(step)
	out := projections.Series{ContentClass: q.Get("content_class"), From: from, To: from.Add(13 * step), StepSeconds: int64(step / time.Second), Objective: 0.99}
	remaining := 1.0
	for i := range 13 {
		ratio := 0.995
		if i == 6 || i == 7 {
			ratio = 0.9
		}
		total := int64(100 + 10*i)
		within := int64(math.Round(ratio * float64(total)))
		missed := total - within
		burn := float64(missed) / (0.01 * float64(total))
		remaining -= float64(missed) / (0.01 * 1500)
		out.Points = append(out.Points, projections.SeriesPoint{
			From: from.Add(time.Duration(i) * step), To: from.Add(time.Duration(i+1) * step),
			Total: total, CompletedWithinBudget: within, WithinBudgetRatio: &ratio, Escalated: missed,
			Concluded: total, Missed: missed, BurnRate: &burn, ErrorBudgetRemaining: remaining,
			LatencyMS:   projections.Percentiles{P50: 400 + float64(10*i), P90: 1800, P99: 4200 + float64(100*i)},
			ManualQueue: projections.QueueStats{Depth: int64(i % 4), OldestAgeSeconds: float64(60 * (i % 4))},
		})
	}
	return http.StatusOK, out
}

// sloAttempts is GET /v1/slo/attempts: one class's distribution.
func (f *FakeAPI) sloAttempts(_ http.ResponseWriter, r *http.Request, _ fakePrincipal, _ []byte) (int, any) {
	window, status, prob := parseWindow(r.URL.Query().Get("window"), defaultSeriesWindow)
	if status != 0 {
		return status, prob
	}
	f.mu.Lock()
	status, prob = f.classProblem(r)
	f.mu.Unlock()
	if status != 0 {
		return status, prob
	}
	b := func(from, to float64, findings, timeouts, failures int64) projections.AttemptBucket {
		return projections.AttemptBucket{FromMS: from, ToMS: &to, Findings: findings, Timeouts: timeouts, Failures: failures}
	}
	now := f.now().UTC()
	return http.StatusOK, map[string]any{"from": now.Add(-window).Truncate(time.Minute), "to": now, "classes": []projections.ServiceTimes{{
		ContentClass: "caption_suggestion", Attempts: 63, Findings: 55, Timeouts: 5, Failures: 3, TimeoutRate: 5.0 / 63,
		FindingMS: projections.Percentiles{P50: 420, P90: 1900, P99: 3800}, AttemptMS: projections.Percentiles{P50: 450, P90: 2500, P99: 10000},
		Buckets: []projections.AttemptBucket{b(256, 304.4, 10, 0, 1), b(362, 430.5, 30, 0, 2), b(1722, 2048, 15, 0, 0), b(9741, 11585, 0, 5, 0)},
	}}}
}

// providerQuery reads the window, class and provider of the provider
// routes and the figures they select; status is not 0 when it refuses
// what the real server refuses, with the problem to answer. It runs with
// f.mu held.
func (f *FakeAPI) providerQuery(r *http.Request, series bool) (window, step time.Duration, ps []projections.ProviderSLO, status int, prob any) {
	q := r.URL.Query()
	def := defaultSLOWindow
	if series {
		def = defaultSeriesWindow
	}
	if window, status, prob = parseWindow(q.Get("window"), def); status != 0 {
		return 0, 0, nil, status, prob
	}
	if series {
		if step, status, prob = parseStep(q.Get("step"), window, window/12, f.now()); status != 0 {
			return 0, 0, nil, status, prob
		}
	}
	if status, prob = f.classProblem(r); status != 0 {
		return 0, 0, nil, status, prob
	}
	provider := q.Get("provider")
	if provider != "" && !domain.ValidProviderName(provider) {
		status, prob = problem(http.StatusBadRequest, "invalid-request", "Invalid request", fmt.Sprintf("must be a provider name, got %q", provider), "provider")
		return 0, 0, nil, status, prob
	}
	if f.providersDown {
		status, prob = problem(http.StatusServiceUnavailable, "not-ready", "Not ready", "slo providers: no read models configured", "")
		return 0, 0, nil, status, prob
	}
	class := q.Get("content_class")
	ps = []projections.ProviderSLO{}
	for _, p := range f.providers {
		if (class == "" || p.ContentClass == class) && (provider == "" || p.Provider == provider) {
			ps = append(ps, p)
		}
	}
	return window, step, ps, 0, nil
}

// sloProviders is GET /v1/slo/providers: the figures set with
// setProviders, of the class and provider asked for.
func (f *FakeAPI) sloProviders(_ http.ResponseWriter, r *http.Request, _ fakePrincipal, _ []byte) (int, any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	window, _, ps, status, prob := f.providerQuery(r, false)
	if status != 0 {
		return status, prob
	}
	now := f.now().UTC()
	q := r.URL.Query()
	return http.StatusOK, projections.ProviderReport{ContentClass: q.Get("content_class"), Provider: q.Get("provider"),
		From: now.Add(-window).Truncate(time.Minute), To: now, Providers: ps}
}

// sloProviderSeries is GET /v1/slo/providers/series: thirteen steps per
// provider and class of setProviders, as sloSeries steps. A deciding
// provider gets five attempts a step, two of them late in the middle
// steps and none in one step (a gap); a shadow four observations a step,
// none in step 9 and none compared in step 10 (gaps), one disagreement in
// step 5.
func (f *FakeAPI) sloProviderSeries(_ http.ResponseWriter, r *http.Request, _ fakePrincipal, _ []byte) (int, any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	window, step, ps, status, prob := f.providerQuery(r, true)
	if status != 0 {
		return status, prob
	}
	from := f.now().Add(-window).UTC().Truncate(step)
	q := r.URL.Query()
	out := projections.ProviderSeries{ContentClass: q.Get("content_class"), Provider: q.Get("provider"),
		From: from, To: from.Add(13 * step), StepSeconds: int64(step / time.Second), Providers: []projections.ProviderSeriesLine{}}
	ratio := func(a, b int64) *float64 {
		if b == 0 {
			return nil
		}
		v := float64(a) / float64(b)
		return &v
	}
	for li, p := range ps {
		line := projections.ProviderSeriesLine{Provider: p.Provider, ContentClass: p.ContentClass}
		for i := range 13 {
			pt := projections.ProviderSeriesPoint{From: from.Add(time.Duration(i) * step), To: from.Add(time.Duration(i+1) * step)}
			if p.Attempts.Total > 0 && i != 3+li {
				pt.Attempts, pt.AttemptWithinBudget = 5, 5
				if i == 6 || i == 7 {
					pt.AttemptWithinBudget = 3
				}
			}
			if p.Shadow.Observed > 0 && i != 9 {
				pt.ShadowObserved, pt.ShadowWithinBudget = 4, 4
				if i%4 == 0 {
					pt.ShadowWithinBudget = 3
				}
				if i != 10 {
					pt.Compared, pt.Agreed = 4, 4
					if i == 5 {
						pt.Agreed = 3
					}
				}
			}
			pt.WithinBudgetRatio = ratio(pt.AttemptWithinBudget, pt.Attempts)
			pt.ShadowWithinBudgetRatio = ratio(pt.ShadowWithinBudget, pt.ShadowObserved)
			pt.AgreementRatio = ratio(pt.Agreed, pt.Compared)
			line.Points = append(line.Points, pt)
		}
		out.Providers = append(out.Providers, line)
	}
	return http.StatusOK, out
}

// me is GET /v1/me, the extension of docs/contracts.md §2 the page signs in with.
func (f *FakeAPI) me(_ http.ResponseWriter, _ *http.Request, who fakePrincipal, _ []byte) (int, any) {
	return http.StatusOK, map[string]string{"name": who.name, "role": who.role}
}
