package runner

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

func TestContent(t *testing.T) {
	t.Parallel()
	h := newHarness(t, []step{hang}, func(c *Config) { c.PayloadRetention = time.Hour })
	ctx := context.Background()
	req := SubmitRequest{ReviewID: "c-1", ContentClass: "c", ContentType: "text/vtt", Content: []byte("WEBVTT\n\n<script>x</script>"), Actor: ledger.Actor{Name: "alice"}}
	rv, _, err := h.Submit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	ct, content, digest, err := h.Content(ctx, "c-1")
	if err != nil || ct != "text/vtt" || string(content) != string(req.Content) || digest != rv.PayloadDigest() {
		t.Fatalf("Content = %q, %q, %q, %v", ct, content, digest, err)
	}
	if _, _, _, err := h.Content(ctx, "nope"); !errors.Is(err, domain.ErrReviewNotFound) {
		t.Errorf("unknown review: %v, want ErrReviewNotFound", err)
	}

	// Other bytes under the recorded digest, then another digest: never
	// served as the reviewed content.
	if _, err := h.Pool().Exec(ctx, `UPDATE runner_payload SET content = 'tampered' WHERE review_id = 'c-1'`); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := h.Content(ctx, "c-1"); !errors.Is(err, ErrContentMismatch) {
		t.Errorf("tampered bytes: %v, want ErrContentMismatch", err)
	}
	if _, err := h.Pool().Exec(ctx, `UPDATE runner_payload SET digest = $1 WHERE review_id = 'c-1'`, Digest([]byte("tampered"))); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := h.Content(ctx, "c-1"); !errors.Is(err, ErrContentMismatch) {
		t.Errorf("other digest: %v, want ErrContentMismatch", err)
	}

	// Purged by retention once the review left pending.
	if err := h.state.done(ctx, "c-1"); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(2 * time.Hour)
	if n, err := h.PurgePayloads(ctx); err != nil || n != 1 {
		t.Fatalf("purge = %d, %v", n, err)
	}
	if _, _, _, err := h.Content(ctx, "c-1"); !errors.Is(err, ErrContentPurged) {
		t.Errorf("purged: %v, want ErrContentPurged", err)
	}
}
