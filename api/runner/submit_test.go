package runner

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/api/provider"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

func TestSubmit(t *testing.T) {
	t.Parallel()
	h := newHarness(t, []step{hang})
	ctx := context.Background()
	req := SubmitRequest{ReviewID: "sub-1", ContentClass: "c", ContentType: "text/plain", Content: []byte("hello"), Actor: ledger.Actor{Name: "alice"}}
	rv, created, err := h.Submit(ctx, req)
	if err != nil || !created || rv.State() != domain.StatePending {
		t.Fatalf("Submit = %v, %v, %v", rv, created, err)
	}
	if rv.PayloadDigest() != "sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824" {
		t.Errorf("digest = %s", rv.PayloadDigest())
	}
	if !rv.Deadline().Equal(t0.Add(10 * time.Second)) {
		t.Errorf("deadline = %s", rv.Deadline())
	}
	again, created, err := h.Submit(ctx, req)
	if err != nil || created || again.Version() != rv.Version() {
		t.Fatalf("same again = %v, created %v, err %v", again, created, err)
	}
	other := req
	other.Content = []byte("other")
	if _, _, err := h.Submit(ctx, other); !errors.Is(err, domain.ErrReviewExists) {
		t.Errorf("other content = %v, want ErrReviewExists", err)
	}
	other = req
	other.ContentClass = "closed"
	if _, _, err := h.Submit(ctx, other); !errors.Is(err, domain.ErrReviewExists) {
		t.Errorf("other class = %v, want ErrReviewExists", err)
	}
	bad := req
	bad.ReviewID = "has space"
	var fe *domain.FieldError
	if _, _, err := h.Submit(ctx, bad); !errors.Is(err, domain.ErrInvalidReviewID) || !errors.As(err, &fe) || fe.Field != "review_id" {
		t.Errorf("bad id = %v", err)
	}
	bad = req
	bad.ReviewID, bad.ContentClass = "sub-2", "nope"
	if _, _, err := h.Submit(ctx, bad); !errors.Is(err, domain.ErrUnknownClass) {
		t.Errorf("unknown class = %v", err)
	}
	// Empty content is content.
	if _, created, err := h.Submit(ctx, SubmitRequest{ReviewID: "empty", ContentClass: "c"}); err != nil || !created {
		t.Errorf("empty content: %v, created %v", err, created)
	}
	// The stored content is the submitted one; events carry only its digest.
	pl, err := h.state.payload(ctx, "sub-1", rv.PayloadDigest())
	if err != nil || string(pl.Content) != "hello" {
		t.Fatalf("payload = %q, %v", pl.Content, err)
	}
	hist, _ := h.ledger.History(ctx, "sub-1")
	for _, e := range hist.Events {
		if strings.Contains(string(e.Data), "hello") {
			t.Errorf("event %s holds the content", e.Type)
		}
	}
}

func TestConcurrentSubmitsMakeOneReview(t *testing.T) {
	t.Parallel()
	h := newHarness(t, []step{hang})
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		created int
	)
	for range 16 {
		wg.Go(func() {
			_, c, err := h.Submit(context.Background(), SubmitRequest{ReviewID: "same", ContentClass: "c", Content: []byte("x")})
			if err != nil {
				t.Errorf("Submit = %v", err)
			}
			if c {
				mu.Lock()
				created++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if created != 1 {
		t.Fatalf("%d submits created the review, want exactly 1", created)
	}
	if n := len(h.events(t, "same")); n != 1 {
		t.Fatalf("%d events, want 1", n)
	}
}

// A leftover payload from a submission that never created its stream is
// replaced by the one whose stream is created.
func TestStagedLeftoverIsReplaced(t *testing.T) {
	t.Parallel()
	h := newHarness(t, []step{finding("left", domain.DecisionAccepted)})
	ctx := context.Background()
	if err := h.state.stage(ctx, "left", "c", payload{Digest: Digest([]byte("old")), Content: []byte("old")}, t0, t0); err != nil {
		t.Fatal(err)
	}
	rv, created, err := h.Submit(ctx, SubmitRequest{ReviewID: "left", ContentClass: "c", Content: []byte("new")})
	if err != nil || !created {
		t.Fatal(err)
	}
	pl, err := h.state.payload(ctx, "left", rv.PayloadDigest())
	if err != nil || string(pl.Content) != "new" {
		t.Fatalf("payload = %q, %v", pl.Content, err)
	}
}

func TestPurgePayloads(t *testing.T) {
	t.Parallel()
	h := newHarness(t, []step{finding("done", domain.DecisionAccepted)}, func(c *Config) { c.PayloadRetention = time.Hour })
	ctx := context.Background()
	h.run(t, "done", "c")
	h.submit(t, "waiting", "c")
	if n, err := h.PurgePayloads(ctx); err != nil || n != 0 {
		t.Fatalf("purge before retention = %d, %v", n, err)
	}
	h.clock.Advance(2 * time.Hour)
	if n, err := h.PurgePayloads(ctx); err != nil || n != 1 {
		t.Fatalf("purge = %d, %v; want 1", n, err)
	}
	if _, err := h.state.payload(ctx, "done", h.load(t, "done").PayloadDigest()); !errors.Is(err, errPayloadMissing) {
		t.Errorf("decided review's payload: %v, want purged", err)
	}
	if _, err := h.state.payload(ctx, "waiting", h.load(t, "waiting").PayloadDigest()); err != nil {
		t.Errorf("pending review's payload purged: %v", err)
	}
	// A pending review whose content is gone cannot be reviewed: it goes
	// to a moderator.
	if _, err := h.Pool().Exec(ctx, `DELETE FROM runner_payload WHERE review_id = 'waiting'`); err != nil {
		t.Fatal(err)
	}
	if err := h.Review(ctx, "waiting"); err != nil {
		t.Fatal(err)
	}
	if rv := h.load(t, "waiting"); rv.State() != domain.StateManualReview || rv.EscalationReason() != reasonPayloadMissing {
		t.Fatalf("%s %s", rv.State(), rv.EscalationReason())
	}
}

// Content never reaches the logs, through submission, provider failures,
// findings, conflicts and escalations.
func TestLogsNeverHoldContent(t *testing.T) {
	t.Parallel()
	const sentinel = "SENTINEL-4f1c2e-do-not-log"
	var h *harness
	h = newHarness(t, []step{
		failure(domain.ClassProviderUnavailable, 0),
		finding("wrong-id", domain.DecisionAccepted),
		{latency: toTimeout, result: provider.Result{Outcome: provider.OutcomeAccepted}, then: func(req provider.Request) {
			if !strings.Contains(string(req.Content), sentinel) {
				t.Errorf("the provider did not get the content")
			}
		}},
	})
	ctx := context.Background()
	for i, class := range []string{"c", "gated"} {
		id := "log-" + itoa(i)
		if _, _, err := h.Submit(ctx, SubmitRequest{ReviewID: id, ContentClass: class, ContentType: "text/plain", Content: []byte(sentinel)}); err != nil {
			t.Fatal(err)
		}
		if err := h.Review(ctx, id); err != nil {
			t.Fatal(err)
		}
		hdr, body := h.signedCallback(id, 3, "accepted", "log-cb-"+itoa(i))
		_ = h.HandleCallback(ctx, id, hdr, body)
	}
	logs := h.logs.String()
	if !strings.Contains(logs, `"review_id":"log-0"`) || !strings.Contains(logs, "conflicting completion") {
		t.Fatalf("logs lack the expected records:\n%s", logs)
	}
	if strings.Contains(logs, sentinel) {
		t.Fatalf("content found in logs:\n%s", logs)
	}
	for _, field := range []string{`"attempt":`, `"elapsed_ms":`, `"outcome":`, `"remaining_budget_ms":`, `"final_state":`} {
		if !strings.Contains(logs, field) {
			t.Errorf("logs lack %s", field)
		}
	}
}
