package httpapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/api/engine"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/memstore"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
	"github.com/reviewledger/reviewledger/projections"
)

// Tokens of the test server, one per role.
const (
	submitterToken = "submitter-token-0001"
	moderatorToken = "moderator-token-0001"
	moderator2     = "moderator-token-0002"
	auditorToken   = "auditor-token-00001"
	adminToken     = "admin-token-0000001"
)

var testTokens = []Token{
	{Role: RoleSubmitter, Name: "platform", Secret: submitterToken},
	{Role: RoleModerator, Name: "mona", Secret: moderatorToken},
	{Role: RoleModerator, Name: "max", Secret: moderator2},
	{Role: RoleAuditor, Name: "audrey", Secret: auditorToken},
	{Role: RoleAdmin, Name: "root", Secret: adminToken},
}

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// fakeRunner does what the runner's Submit does with the real ledger,
// records callbacks and reports a settable in-flight count.
type fakeRunner struct {
	ledger   *ledger.Ledger
	policy   domain.Policy
	now      func() time.Time
	inFlight atomic.Int64

	mu          sync.Mutex
	callbackErr error
	callbacks   []callbackCall
	requeued    []string
}

type callbackCall struct {
	id     string
	header http.Header
	body   []byte
}

func (f *fakeRunner) Submit(ctx context.Context, req engine.SubmitRequest) (*ledger.Snapshot, bool, error) {
	cp, err := f.policy.Class(req.ContentClass)
	if err != nil {
		return nil, false, err
	}
	sum := sha256.Sum256(req.Content)
	digest := "sha256:" + hex.EncodeToString(sum[:])
	e, err := domain.Submit(domain.SubmitCommand{ReviewID: req.ReviewID, ContentClass: req.ContentClass, ContentType: req.ContentType,
		PayloadDigest: digest, PayloadBytes: len(req.Content), Policy: cp, SubmittedBy: req.Actor.Name, Now: f.now()})
	if err != nil {
		return nil, false, err
	}
	rv, err := f.ledger.Create(ctx, e, req.Actor)
	if errors.Is(err, eventstore.ErrWrongExpectedVersion) {
		rv, err = f.ledger.Load(ctx, req.ReviewID)
		if err != nil {
			return nil, false, err
		}
		if !rv.SameSubmission(req.ContentClass, req.ContentType, digest) {
			return nil, false, domain.ErrReviewExists
		}
		return rv, false, nil
	}
	return rv, err == nil, err
}

func (f *fakeRunner) HandleCallback(ctx context.Context, id string, h http.Header, body []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.callbacks = append(f.callbacks, callbackCall{id, h, body})
	return f.callbackErr
}

func (f *fakeRunner) Outstanding() int { return int(f.inFlight.Load()) }

// Requeue appends the Requeued event as the engine does (without a work
// record: nothing works the review here) and notes the review.
func (f *fakeRunner) Requeue(ctx context.Context, rv *ledger.Snapshot, e domain.Requeued, by ledger.Actor) (*ledger.Snapshot, error) {
	next, err := f.ledger.Append(ctx, rv, by, e)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.requeued = append(f.requeued, e.ReviewID)
	f.mu.Unlock()
	return next, nil
}

type harness struct {
	t      testing.TB
	srv    *Server
	ledger *ledger.Ledger
	runner *fakeRunner
	pool   *pgxpool.Pool
	store  eventstore.Store
	db     *projections.DB
	logs   *syncBuffer
	now    time.Time
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newHarness(t testing.TB, configure ...func(*Config, *Deps)) *harness {
	t.Helper()
	h := &harness{t: t, logs: &syncBuffer{}, now: t0}
	h.store = memstore.New()
	h.ledger = ledger.New(h.store)
	clock := func() time.Time { return h.now }
	h.runner = &fakeRunner{ledger: h.ledger, policy: harnessPolicy(), now: clock}
	cfg := Config{
		Tokens:  testTokens,
		Logger:  slog.New(slog.NewJSONHandler(h.logs, nil)),
		Now:     clock,
		Classes: h.runner.policy.Names(),
	}
	deps := Deps{Ledger: h.ledger, Reviews: h.runner}
	for _, f := range configure {
		f(&cfg, &deps)
	}
	srv, err := New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	h.srv = srv
	return h
}

// newDBHarness is a harness whose read models are in a PostgreSQL
// database of its own. The ledger stays in memory: its global order is
// readable at once, where PostgreSQL's waits for the oldest transaction
// running anywhere on the server.
func newDBHarness(t testing.TB, configure ...func(*Config, *Deps)) *harness {
	t.Helper()
	pool := dbtest.Pool(t)
	db := projections.NewDB(pool)
	h := newHarness(t, append([]func(*Config, *Deps){func(_ *Config, d *Deps) { d.ReadModels = db }}, configure...)...)
	h.pool, h.db = pool, db
	return h
}

// catchUp brings the read models up to date with the ledger.
func (h *harness) catchUp() {
	h.t.Helper()
	r, err := projections.NewRunner(projections.Config{Pool: h.pool, Store: h.store, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: func() time.Time { return h.now }})
	if err != nil {
		h.t.Fatal(err)
	}
	if err := r.CatchUp(context.Background()); err != nil {
		h.t.Fatal(err)
	}
}

// do sends a request to the real Echo handler.
func (h *harness) do(method, path, token, body string, header ...string) *httptest.ResponseRecorder {
	h.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, r)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.srv.Handler().ServeHTTP(rec, req)
	return rec
}

// submit creates a review through the API.
func (h *harness) submit(id, class, content string) reviewView {
	h.t.Helper()
	rec := h.do("POST", "/v1/reviews", submitterToken, submitJSON(id, class, content))
	if rec.Code != http.StatusAccepted {
		h.t.Fatalf("submit %s: %d %s", id, rec.Code, rec.Body)
	}
	return decode[reviewView](h.t, rec)
}

// escalate moves a review to manual_review through the ledger, as the
// runner would.
func (h *harness) escalate(id string, reason domain.EscalationReason) {
	h.t.Helper()
	ctx := context.Background()
	rv, err := h.ledger.Load(ctx, id)
	if err != nil {
		h.t.Fatal(err)
	}
	e, err := rv.Escalate(reason, "", h.now)
	if err != nil {
		h.t.Fatal(err)
	}
	if _, err := h.ledger.Append(ctx, rv, ledger.Actor{Name: "runner"}, e); err != nil {
		h.t.Fatal(err)
	}
}

func submitJSON(id, class, content string) string {
	b, _ := json.Marshal(map[string]string{"review_id": id, "content_class": class, "content_type": "text/plain", "content": content})
	return string(b)
}

func decode[T any](t testing.TB, rec *httptest.ResponseRecorder) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatalf("decode %T from %q: %v", v, rec.Body, err)
	}
	return v
}

// wantProblem checks a problem+json answer: status, type kind, field and
// request ID.
func wantProblem(t testing.TB, rec *httptest.ResponseRecorder, status int, kind, field string) Problem {
	t.Helper()
	if rec.Code != status {
		t.Fatalf("status %d, want %d: %s", rec.Code, status, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != MIMEProblem {
		t.Fatalf("Content-Type %q, want %q", ct, MIMEProblem)
	}
	p := decode[Problem](t, rec)
	if p.Status != status || p.Type != ProblemTypeBase+kind || p.Title == "" {
		t.Fatalf("problem %+v, want status %d kind %s", p, status, kind)
	}
	if p.Field != field {
		t.Fatalf("problem field %q, want %q (%+v)", p.Field, field, p)
	}
	if p.RequestID == "" || p.RequestID != rec.Header().Get("X-Request-Id") {
		t.Fatalf("request_id %q, header %q", p.RequestID, rec.Header().Get("X-Request-Id"))
	}
	return p
}

// keys returns the JSON object's keys.
func keys(t testing.TB, raw []byte) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("not a JSON object: %q: %v", raw, err)
	}
	return m
}

func wantKeys(t testing.TB, m map[string]json.RawMessage, want ...string) {
	t.Helper()
	if len(m) != len(want) {
		t.Errorf("keys %v, want exactly %v", m, want)
	}
	for _, k := range want {
		if _, ok := m[k]; !ok {
			t.Errorf("key %q missing from %v", k, m)
		}
	}
}

// harnessPolicy is the default policy with four-eyes on publishing_rule
// (approvals: 2), as a policy file would set it.
func harnessPolicy() domain.Policy {
	p := domain.DefaultPolicy()
	rule := p.Classes["publishing_rule"]
	rule.Approvals = 2
	p.Classes["publishing_rule"] = rule
	return p
}
