package engine

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/api/engine/provider"
	"github.com/reviewledger/reviewledger/api/engine/work"
	"github.com/reviewledger/reviewledger/domain"
)

func TestCallbackErrors(t *testing.T) {
	t.Parallel()
	h := newHarness(t, []step{hang})
	h.submit(t, "rev-e", "c")
	ctx := context.Background()
	hdr, body := h.signedCallback("rev-e", 1, "accepted", "w1")
	hdr.Set(provider.HeaderWebhookSignature, "v1,AAAA")
	if err := h.HandleCallback(ctx, "rev-e", hdr, body); !errors.Is(err, provider.ErrInvalidSignature) {
		t.Errorf("bad signature = %v", err)
	}
	hdr, body = h.signedCallback("rev-e", 1, "accepted", "w2")
	h.clock.Advance(6 * time.Minute)
	if err := h.HandleCallback(ctx, "rev-e", hdr, body); !errors.Is(err, provider.ErrInvalidSignature) {
		t.Errorf("stale signature = %v", err)
	}
	hdr, body = h.signedCallback("nobody", 1, "accepted", "w3")
	if err := h.HandleCallback(ctx, "nobody", hdr, body); !errors.Is(err, domain.ErrReviewNotFound) {
		t.Errorf("unknown review = %v", err)
	}
	for i, b := range []string{`not json`, `{"review_id":"rev-e","attempt":1,"state":"maybe"}`, `{"review_id":"other","attempt":1,"state":"accepted"}`, `{"review_id":"rev-e","state":"accepted"}`} {
		hdr := http.Header{}
		h.signer.SignHeader(hdr, "bad-"+strconv.Itoa(i), h.clock.Now(), []byte(b))
		if err := h.HandleCallback(ctx, "rev-e", hdr, []byte(b)); !errors.Is(err, domain.ErrInvalidFinding) {
			t.Errorf("body %s = %v, want ErrInvalidFinding", b, err)
		}
		if err := h.HandleCallback(ctx, "rev-e", hdr, []byte(b)); !errors.Is(err, domain.ErrInvalidFinding) {
			t.Errorf("body %s delivered again = %v, want ErrInvalidFinding", b, err)
		}
	}
	// No attempt in flight: conflicting.
	hdr, body = h.signedCallback("rev-e", 1, "accepted", "w4")
	if err := h.HandleCallback(ctx, "rev-e", hdr, body); !errors.Is(err, ErrConflictingCompletion) {
		t.Errorf("no attempt in flight = %v", err)
	}
	if n := len(h.events(t, "rev-e")); n != 1 {
		t.Errorf("%d events, want only Submitted", n)
	}
}

// A delivery is its webhook-id for its review: the same id naming another
// review is another delivery, applied on its own (a provider reusing ids, or
// two attempts given the same one, must not lose a finding).
func TestWebhookIDOfAnotherReview(t *testing.T) {
	t.Parallel()
	h := newHarness(t, []step{async})
	ctx := context.Background()
	for _, id := range []string{"two-a", "two-b"} {
		h.submit(t, id, "c")
		h.workOnce(t, id)
	}
	for _, id := range []string{"two-a", "two-b"} {
		hdr, body := h.signedCallback(id, 1, "accepted", "same-webhook-id")
		if err := h.HandleCallback(ctx, id, hdr, body); err != nil {
			t.Fatalf("callback for %s = %v", id, err)
		}
		if rv := h.load(t, id); rv.State() != domain.StateAccepted {
			t.Errorf("%s: %s, want accepted by its callback", id, rv.State())
		}
	}
}

// failingOutcomes is a store whose delivery outcomes cannot be written.
type failingOutcomes struct{ work.Store }

func (failingOutcomes) SetDeliveryOutcome(context.Context, string, string, string) error {
	return errors.New("outcome store down")
}

// When the outcome of an applied delivery could not be stored, a
// redelivery is answered from the ledger: applied, not a conflict.
func TestRedeliveryOfAnAppliedFindingWhoseOutcomeWasLost(t *testing.T) {
	t.Parallel()
	h := newHarness(t, []step{async})
	h.submit(t, "lost-outcome", "c")
	h.workOnce(t, "lost-outcome")
	h.store = failingOutcomes{h.store}
	ctx := context.Background()
	hdr, body := h.signedCallback("lost-outcome", 1, "rejected", "lo-1")
	if err := h.HandleCallback(ctx, "lost-outcome", hdr, body); err != nil {
		t.Fatalf("first delivery = %v", err)
	}
	for range 2 {
		if err := h.HandleCallback(ctx, "lost-outcome", hdr, body); err != nil {
			t.Fatalf("redelivery = %v, want applied", err)
		}
	}
	if got := h.conflicts(t, "lost-outcome"); len(got) != 0 {
		t.Errorf("conflicts recorded for an applied finding: %v", got)
	}
	if n := h.counter(t, h.metrics.storeErrors); n == 0 {
		t.Error("the failed outcome writes were not counted")
	}
}

func TestContent(t *testing.T) {
	t.Parallel()
	h := newPGHarness(t, []step{hang}, func(c *Config) { c.PayloadRetention = time.Hour })
	ctx := context.Background()
	req := SubmitRequest{ReviewID: "c-1", ContentClass: "c", ContentType: "text/vtt", Content: []byte("WEBVTT\n\n<script>x</script>")}
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
	if _, err := h.pool.Exec(ctx, `UPDATE review_payload SET content = 'tampered' WHERE review_id = 'c-1'`); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := h.Content(ctx, "c-1"); !errors.Is(err, ErrContentMismatch) {
		t.Errorf("tampered bytes: %v, want ErrContentMismatch", err)
	}
	if _, err := h.pool.Exec(ctx, `UPDATE review_payload SET digest = $1 WHERE review_id = 'c-1'`, Digest([]byte("tampered"))); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := h.Content(ctx, "c-1"); !errors.Is(err, ErrContentMismatch) {
		t.Errorf("other digest: %v, want ErrContentMismatch", err)
	}
	if _, err := h.pool.Exec(ctx, `DELETE FROM review_payload WHERE review_id = 'c-1'`); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := h.Content(ctx, "c-1"); !errors.Is(err, ErrContentPurged) {
		t.Errorf("purged: %v, want ErrContentPurged", err)
	}
}
