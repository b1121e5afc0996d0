package httpapi

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/reviewledger/reviewledger/api/contentaccess"
	"github.com/reviewledger/reviewledger/api/engine"

	"github.com/reviewledger/reviewledger/api/engine/hint"
	"github.com/reviewledger/reviewledger/api/engine/provider"
	"github.com/reviewledger/reviewledger/api/engine/work/pgwork"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/pgstore"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// asyncProvider takes every attempt for asynchronous review: the finding
// comes by callback.
type asyncProvider struct{}

func (asyncProvider) Call(context.Context, provider.Request) provider.Result {
	return provider.Result{Outcome: provider.OutcomeAccepted}
}

// withRunner is a server on the real engine, ledger and PostgreSQL.
type withRunner struct {
	*harness
	svc    *engine.Engine
	signer *provider.Signer
	pool   *pgxpool.Pool
}

func newWithRunner(t *testing.T) *withRunner {
	t.Helper()
	pool := dbtest.Pool(t)
	store := pgstore.New(pool, pgstore.Config{})
	t.Cleanup(store.Close)
	work := pgwork.New(pool, store)
	l := work.Ledger(ledger.GroupCommit{})
	signer, err := provider.NewSigner("whsec_" + base64.StdEncoding.EncodeToString([]byte("a-callback-key-of-32-bytes-long!")))
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := engine.New(engine.Config{Policy: domain.DefaultPolicy(), Store: work, Ledger: l, Hints: hint.NewGoChannel(logger), Provider: asyncProvider{}, Signer: signer, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, logs: &syncBuffer{}}
	h.ledger = l
	srv, err := New(Config{Tokens: testTokens, Logger: slog.New(slog.NewJSONHandler(h.logs, nil))}, Deps{Ledger: l, Reviews: svc, ContentAccess: contentaccess.New(pool)})
	if err != nil {
		t.Fatal(err)
	}
	h.srv = srv
	return &withRunner{harness: h, svc: svc, signer: signer, pool: pool}
}

func (w *withRunner) callback(id, webhookID string, attempt int, state string, at time.Time) *httpResponse {
	body := fmt.Sprintf(`{"review_id":%q,"attempt":%d,"state":%q,"reasons":["checked"]}`, id, attempt, state)
	rec := w.do("POST", "/v1/reviews/"+id+"/findings", "", body,
		provider.HeaderWebhookID, webhookID,
		provider.HeaderWebhookTimestamp, fmt.Sprint(at.Unix()),
		provider.HeaderWebhookSignature, w.signer.Sign(webhookID, at, []byte(body)))
	return &httpResponse{rec.Code, rec.Body.String()}
}

type httpResponse struct {
	code int
	body string
}

func TestConcurrentSubmitsMakeOneReview(t *testing.T) {
	w := newWithRunner(t)
	body := submitJSON("same-1", "caption_suggestion", "one text")
	codes := make(chan int, 16)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() { codes <- w.do("POST", "/v1/reviews", submitterToken, body).Code })
	}
	wg.Wait()
	close(codes)
	count := map[int]int{}
	for c := range codes {
		count[c]++
	}
	if count[http.StatusAccepted] != 1 || count[http.StatusOK] != 15 {
		t.Fatalf("answers %v, want one 202 and fifteen 200", count)
	}
	h, err := w.ledger.History(context.Background(), "same-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Events) != 1 {
		t.Fatalf("%d events in the stream, want 1", len(h.Events))
	}
	wantProblem(t, w.do("POST", "/v1/reviews", submitterToken, submitJSON("same-1", "caption_suggestion", "another text")), http.StatusConflict, "review-exists", "")
	wantProblem(t, w.do("POST", "/v1/reviews", submitterToken, submitJSON("x", "nope", "t")), http.StatusUnprocessableEntity, "unknown-class", "content_class")
}

func TestCallbacksThroughTheEngine(t *testing.T) {
	w := newWithRunner(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.svc.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("Review: %v", err)
		}
	}()
	w.submit("cb-1", "caption_suggestion", "text")
	// Wait for the attempt to start (the provider took it asynchronously).
	clocktest.Eventually(t, "attempt 1 started", func() bool {
		rv, err := w.ledger.Load(context.Background(), "cb-1")
		if err != nil {
			t.Fatal(err)
		}
		a, _, _, _ := rv.InFlight()
		return a == 1
	})
	now := time.Now()
	// Bad and stale signatures: 401.
	rec := w.do("POST", "/v1/reviews/cb-1/findings", "", `{"review_id":"cb-1","attempt":1,"state":"accepted"}`,
		provider.HeaderWebhookID, "m0", provider.HeaderWebhookTimestamp, fmt.Sprint(now.Unix()), provider.HeaderWebhookSignature, "v1,AAAA")
	wantProblem(t, rec, http.StatusUnauthorized, "invalid-signature", "")
	if r := w.callback("cb-1", "m1", 1, "accepted", now.Add(-10*time.Minute)); r.code != http.StatusUnauthorized {
		t.Fatalf("stale: %d %s", r.code, r.body)
	}
	// The finding for the attempt in flight applies.
	if r := w.callback("cb-1", "m2", 1, "accepted", now); r.code != http.StatusOK {
		t.Fatalf("finding: %d %s", r.code, r.body)
	}
	rv, err := w.ledger.Load(context.Background(), "cb-1")
	if err != nil || rv.State() != domain.StateAccepted {
		t.Fatalf("after the finding: %v %v", rv.State(), err)
	}
	// A second finding for the same review (another delivery): 409.
	if r := w.callback("cb-1", "m3", 1, "rejected", now); r.code != http.StatusConflict || !strings.Contains(r.body, "conflicting-completion") {
		t.Fatalf("late finding: %d %s", r.code, r.body)
	}
	if r := w.callback("nope", "m4", 1, "rejected", now); r.code != http.StatusNotFound {
		t.Fatalf("unknown review: %d %s", r.code, r.body)
	}
	view := decode[reviewView](t, w.do("GET", "/v1/reviews/cb-1", auditorToken, ""))
	if view.State != "accepted" || view.Attempts != 1 || view.DecidedAt == nil || len(view.Reasons) != 1 {
		t.Fatalf("view %+v", view)
	}
}
