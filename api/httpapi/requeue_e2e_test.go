package httpapi

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/api/audit"
	"github.com/reviewledger/reviewledger/api/engine"
	"github.com/reviewledger/reviewledger/api/engine/hint"
	"github.com/reviewledger/reviewledger/api/engine/provider"
	"github.com/reviewledger/reviewledger/api/engine/work/pgwork"
	"github.com/reviewledger/reviewledger/api/queuefeed"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/pgstore"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
	"github.com/reviewledger/reviewledger/projections"
)

// outageProvider answers 503 while down and accepts everything once up.
type outageProvider struct {
	down  atomic.Bool
	calls atomic.Int64
}

func (p *outageProvider) Call(_ context.Context, req provider.Request) provider.Result {
	p.calls.Add(1)
	if p.down.Load() {
		return provider.Result{Outcome: provider.OutcomeFailure, Classification: domain.ClassProviderUnavailable, Detail: "http 503"}
	}
	return provider.Result{Outcome: provider.OutcomeFinding,
		Finding: domain.Finding{ReviewID: req.ReviewID, Attempt: req.Attempt, State: domain.DecisionAccepted, Reasons: []string{"recovered"}}}
}

// TestOutageRequeueRecovers runs the real engine, ledger and projections
// on PostgreSQL: a provider outage sends reviews to the manual queue, a
// moderator requeues them in bulk, page by page, and the recovered
// provider decides each in a second round; the audit still verifies.
func TestOutageRequeueRecovers(t *testing.T) {
	const n = 20
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool := dbtest.Pool(t)
	store := pgstore.New(pool, pgstore.Config{PollInterval: 20 * time.Millisecond})
	t.Cleanup(store.Close)
	work := pgwork.New(pool, store)
	l := work.Ledger(ledger.GroupCommit{})
	signer, err := provider.NewSigner("whsec_" + base64.StdEncoding.EncodeToString([]byte("a-callback-key-of-32-bytes-long!")))
	if err != nil {
		t.Fatal(err)
	}
	policy := domain.Policy{Classes: map[string]domain.ClassPolicy{"caption_suggestion": {
		Budget: 5 * time.Second, AttemptTimeout: time.Second, MaxAttempts: 2,
		Backoff: domain.Backoff{Initial: 10 * time.Millisecond, Max: 20 * time.Millisecond}, OnExhaustion: domain.ExhaustToManualReview, Priority: 1,
	}}}
	prov := &outageProvider{}
	prov.down.Store(true)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	eng, err := engine.New(engine.Config{Policy: policy, Store: work, Ledger: l, Hints: hint.NewGoChannel(quiet), Provider: prov, Signer: signer, Logger: quiet,
		PollInterval: 50 * time.Millisecond, RetryBudget: 1})
	if err != nil {
		t.Fatal(err)
	}
	engDone := make(chan error, 1)
	go func() { engDone <- eng.Run(ctx) }()
	proj, err := projections.NewRunner(projections.Config{Pool: pool, Store: store, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	projDone := make(chan error, 1)
	go func() { projDone <- proj.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-engDone; err != nil {
			t.Errorf("engine: %v", err)
		}
		if err := <-projDone; err != nil {
			t.Errorf("projections: %v", err)
		}
	}()
	h := &harness{t: t, logs: &syncBuffer{}, ledger: l, pool: pool, store: store}
	srv, err := New(Config{Tokens: testTokens, Logger: slog.New(slog.NewJSONHandler(h.logs, nil)), Classes: policy.Names()},
		Deps{Ledger: l, Reviews: eng, ReadModels: projections.NewDB(pool)})
	if err != nil {
		t.Fatal(err)
	}
	h.srv = srv

	for i := range n {
		if rec := h.do("POST", "/v1/reviews", submitterToken, submitJSON(fmt.Sprintf("out-%02d", i), "caption_suggestion", "text")); rec.Code != http.StatusAccepted {
			t.Fatalf("submit: %d %s", rec.Code, rec.Body)
		}
	}
	// The outage: every review exhausts its attempts and waits for a
	// moderator.
	clocktest.Eventually(t, "the outage fills the queue", func() bool {
		return h.bulk("/v1/manual-queue/bulk/requeue", moderatorToken, `{"filter":{"content_class":"caption_suggestion"},"dry_run":true}`).Total == n
	})
	for i := range n {
		rv, err := l.Load(ctx, fmt.Sprintf("out-%02d", i))
		if err != nil || rv.State() != domain.StateManualReview || rv.Attempts() != 2 {
			t.Fatalf("out-%02d after the outage: %+v %v", i, rv, err)
		}
	}

	// A second server with a store and ledger of its own (as another
	// process would have) streams the queue's changes, which the first
	// one makes: the stream follows the database's global order.
	storeB := pgstore.New(pool, pgstore.Config{PollInterval: 20 * time.Millisecond})
	t.Cleanup(storeB.Close)
	ledgerB := ledger.New(storeB)
	feedB := queuefeed.New(storeB, ledgerB, queuefeed.Config{})
	go func() { _ = feedB.Follow(ctx) }()
	srvB, err := New(Config{Tokens: testTokens, Logger: quiet}, Deps{Ledger: ledgerB, Reviews: reviewsOnly{h.runnerless()}, Feed: feedB})
	if err != nil {
		t.Fatal(err)
	}
	httpB := httptest.NewServer(srvB.Handler())
	defer httpB.Close()
	defer srvB.Close() // ends the stream first: Close waits for open connections
	stream := openStream(t, httpB.URL, moderatorToken, "")
	if ev := stream.next(); ev.event != "ready" {
		t.Fatalf("stream B: %+v", ev)
	}

	prov.down.Store(false)
	requeued, cursor := 0, ""
	for {
		v := h.bulk("/v1/manual-queue/bulk/requeue", moderatorToken,
			fmt.Sprintf(`{"filter":{"content_class":"caption_suggestion"},"limit":8,"cursor":%q,"note":"provider recovered"}`, cursor))
		requeued += v.Counts[OutcomeRequeued]
		if v.Counts[OutcomeRequeued] != len(v.Items) {
			t.Fatalf("page outcomes %+v", v.Counts)
		}
		if v.NextCursor == nil {
			break
		}
		cursor = *v.NextCursor
	}
	if requeued != n {
		t.Fatalf("requeued %d of %d", requeued, n)
	}
	seen := map[string]bool{}
	for len(seen) < n {
		if ch := stream.change(); ch.Type == queuefeed.Requeued && ch.Round == 2 && ch.By == "mona" {
			seen[ch.ReviewID] = true
		}
	}
	// The recovered provider decides every one in round 2, attempts
	// numbered on.
	clocktest.Eventually(t, "the recovered provider decides the requeued reviews", func() bool {
		for i := range n {
			rv, err := l.Load(ctx, fmt.Sprintf("out-%02d", i))
			if err != nil || rv.State() != domain.StateAccepted {
				return false
			}
		}
		return true
	})
	for i := range n {
		id := fmt.Sprintf("out-%02d", i)
		rv, _ := l.Load(ctx, id)
		if rv.Round() != 2 || rv.Attempts() != 3 || rv.RoundAttempts() != 1 || rv.DecidedBy() != "provider" {
			t.Fatalf("%s: round %d attempts %d (%d this round) decided by %s", id, rv.Round(), rv.Attempts(), rv.RoundAttempts(), rv.DecidedBy())
		}
	}
	clocktest.Eventually(t, "the queue empties", func() bool {
		return h.bulk("/v1/manual-queue/bulk/requeue", moderatorToken, `{"filter":{},"dry_run":true}`).Total == 0
	})
	rep, err := (&audit.Verifier{Store: store, Histories: l}).Verify(ctx, "")
	if err != nil || rep.Err() != nil || rep.Reviews != n {
		t.Fatalf("audit verify: %+v %v %v", rep, err, rep.Err())
	}
}

// runnerless is a Reviews that submits nothing: a server that only reads.
func (h *harness) runnerless() Reviews {
	return &fakeRunner{ledger: h.ledger, policy: harnessPolicy(), now: time.Now}
}
