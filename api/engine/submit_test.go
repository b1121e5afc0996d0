package engine

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/api/engine/provider"
	"github.com/reviewledger/reviewledger/api/engine/work"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

func TestSubmit(t *testing.T) {
	t.Parallel()
	for name, newH := range map[string]func(*testing.T, []step, ...func(*Config)) *harness{"memory": newHarness, "postgres": newPGHarness} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testSubmit(t, newH(t, []step{hang}))
		})
	}
}

func testSubmit(t *testing.T, h *harness) {
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
	// Stream, content and work record together; the record due at once,
	// held by nobody (no engine runs here).
	rec, ok := h.mem.Record("sub-1")
	if !ok || !rec.Deadline.Equal(rv.Deadline()) || !rec.DueAt.Equal(t0) || rec.Owner != "" {
		t.Fatalf("work record %+v, %v", rec, ok)
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
	other = req
	other.ContentType = "text/vtt"
	if _, _, err := h.Submit(ctx, other); !errors.Is(err, domain.ErrReviewExists) {
		t.Errorf("other content type = %v, want ErrReviewExists", err)
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
	if _, ok := h.mem.Record("sub-2"); ok {
		t.Error("a refused submit wrote a work record")
	}
	// Empty content is content.
	if _, created, err := h.Submit(ctx, SubmitRequest{ReviewID: "empty", ContentClass: "c"}); err != nil || !created {
		t.Errorf("empty content: %v, created %v", err, created)
	}
	// The stored content is the submitted one; events carry only its digest.
	pl, err := h.store.Payload(ctx, "sub-1")
	if err != nil || string(pl.Content) != "hello" || pl.Digest != rv.PayloadDigest() {
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
	for name, newH := range map[string]func(*testing.T, []step, ...func(*Config)) *harness{"memory": newHarness, "postgres": newPGHarness} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := newH(t, []step{hang})
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
		})
	}
}

// Concurrent submissions of different reviews are written together: fewer
// group commits than reviews, each review with its own stream, content and
// record.
func TestSubmissionsAreGroupCommitted(t *testing.T) {
	t.Parallel()
	h := newPGHarness(t, []step{hang})
	const n = 64
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			id := "group-" + strconv.Itoa(i)
			if _, created, err := h.Submit(context.Background(), SubmitRequest{ReviewID: id, ContentClass: "c", Content: []byte(id)}); err != nil || !created {
				t.Errorf("Submit(%s) = %v, created %v", id, err, created)
			}
		})
	}
	wg.Wait()
	st := h.ledger.Stats()
	if st.Appends != n || st.Batches >= n {
		t.Errorf("group commit stats %+v: want %d appends in fewer batches", st, n)
	}
	for i := range n {
		id := "group-" + strconv.Itoa(i)
		if _, ok := h.mem.Record(id); !ok {
			t.Errorf("%s has no work record", id)
		}
		if pl, err := h.store.Payload(context.Background(), id); err != nil || string(pl.Content) != id {
			t.Errorf("%s content %q, %v", id, pl.Content, err)
		}
	}
	t.Logf("%d submissions in %d group commits", st.Appends, st.Batches)
}

// A resubmission of a pending review whose record was lost writes the record
// again (due at once); one of a decided review writes nothing.
func TestResubmitMakesSureOfTheRecord(t *testing.T) {
	t.Parallel()
	h := newHarness(t, []step{finding("re-1", domain.DecisionAccepted)})
	ctx := context.Background()
	req := SubmitRequest{ReviewID: "re-1", ContentClass: "c", Content: []byte("x")}
	if _, _, err := h.Submit(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := h.store.Done(ctx, "re-1"); err != nil {
		t.Fatal(err)
	}
	if _, created, err := h.Submit(ctx, req); err != nil || created {
		t.Fatalf("resubmit = created %v, %v", created, err)
	}
	if _, ok := h.mem.Record("re-1"); !ok {
		t.Fatal("the resubmit of a pending review did not write its record again")
	}
	if rv := h.drive(t, "re-1"); rv.State() != domain.StateAccepted {
		t.Fatalf("state %s", rv.State())
	}
	if _, created, err := h.Submit(ctx, req); err != nil || created {
		t.Fatalf("resubmit of a decided review = created %v, %v", created, err)
	}
	if _, ok := h.mem.Record("re-1"); ok {
		t.Fatal("the resubmit of a decided review wrote a record")
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
	if _, err := h.store.Payload(ctx, "done"); !errors.Is(err, work.ErrPayloadMissing) {
		t.Errorf("decided review's payload: %v, want purged", err)
	}
	if _, err := h.store.Payload(ctx, "waiting"); err != nil {
		t.Errorf("pending review's payload purged: %v", err)
	}
	// A pending review whose content is gone cannot be reviewed: it goes
	// to a moderator.
	h.submit(t, "gone", "c")
	h.mem.(interface{ DeletePayload(string) }).DeletePayload("gone")
	if rv := h.drive(t, "gone"); rv.State() != domain.StateManualReview || rv.EscalationReason() != domain.ReasonPayloadMissing {
		t.Fatalf("%s %s", rv.State(), rv.EscalationReason())
	}
}

// Content never reaches the logs, through submission, provider failures,
// findings, conflicts and escalations.
func TestLogsNeverHoldContent(t *testing.T) {
	t.Parallel()
	const sentinel = "SENTINEL-4f1c2e-do-not-log"
	h := newHarness(t, []step{
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
		id := "log-" + strconv.Itoa(i)
		if _, _, err := h.Submit(ctx, SubmitRequest{ReviewID: id, ContentClass: class, ContentType: "text/plain", Content: []byte(sentinel)}); err != nil {
			t.Fatal(err)
		}
		h.drive(t, id)
		hdr, body := h.signedCallback(id, 3, "accepted", "log-cb-"+strconv.Itoa(i))
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
