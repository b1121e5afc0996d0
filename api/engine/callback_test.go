package engine

import (
	"context"
	"errors"
	"net/http"
	"slices"
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

// A callback whose finding is the one the review holds for its attempt
// changes nothing and is answered applied, not refused, whoever recorded
// it: the provider's response, or a callback under another webhook-id
// (here on a class whose accept is held for a moderator, so the review
// has moved on to manual_review). Another finding for that attempt (other
// reasons, another state) or one for another attempt is refused as before.
func TestCallbackOfTheRecordedFinding(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	check := func(t *testing.T, h *harness, id string, state domain.Decision, reasons []string, wantConflicts []string) {
		t.Helper()
		before := h.types(t, id)
		for _, w := range []string{"same-1", "same-2"} {
			hdr, body := h.signedFinding(id, 1, string(state), reasons, w)
			for range 2 {
				if err := h.HandleCallback(ctx, id, hdr, body); err != nil {
					t.Fatalf("%s: the recorded finding = %v, want applied", w, err)
				}
			}
		}
		other := domain.DecisionAccepted
		if state == other {
			other = domain.DecisionRejected
		}
		for _, c := range []struct {
			w       string
			attempt int
			state   domain.Decision
			reasons []string
		}{
			{"other-reasons", 1, state, append(slices.Clone(reasons), "more")},
			{"other-state", 1, other, reasons},
			{"other-attempt", 2, state, reasons},
		} {
			hdr, body := h.signedFinding(id, c.attempt, string(c.state), c.reasons, c.w)
			if err := h.HandleCallback(ctx, id, hdr, body); !errors.Is(err, ErrConflictingCompletion) {
				t.Errorf("%s = %v, want ErrConflictingCompletion", c.w, err)
			}
		}
		if got := h.types(t, id); !slices.Equal(got, before) {
			t.Errorf("events %v, want %v", got, before)
		}
		if got := h.conflicts(t, id); !slices.Equal(got, wantConflicts) {
			t.Errorf("conflicts %v, want %v", got, wantConflicts)
		}
		if n := h.counter(t, h.metrics.conflicts.WithLabelValues(domain.SourceCallback)); n != float64(len(wantConflicts)) {
			t.Errorf("%v callback conflicts counted, want %d", n, len(wantConflicts))
		}
	}
	t.Run("by the response", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, []step{finding("rev-resp", domain.DecisionRejected, "spam", "lang:en")})
		if rv := h.run(t, "rev-resp", "c"); rv.State() != domain.StateRejected {
			t.Fatalf("%s, want rejected by the response", rv.State())
		}
		check(t, h, "rev-resp", domain.DecisionRejected, []string{"spam", "lang:en"},
			[]string{"callback:review_moved_on:1", "callback:review_moved_on:1", "callback:review_moved_on:2"})
	})
	t.Run("by another webhook", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, []step{async})
		h.submit(t, "rev-gated", "gated")
		h.workOnce(t, "rev-gated")
		hdr, body := h.signedFinding("rev-gated", 1, "accepted", nil, "first")
		if err := h.HandleCallback(ctx, "rev-gated", hdr, body); err != nil {
			t.Fatal(err)
		}
		if rv := h.load(t, "rev-gated"); rv.State() != domain.StateManualReview {
			t.Fatalf("%s, want manual_review: the accept is held", rv.State())
		}
		check(t, h, "rev-gated", domain.DecisionAccepted, []string{},
			[]string{"callback:review_moved_on:1", "callback:review_moved_on:1", "callback:review_moved_on:2"})
	})
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
