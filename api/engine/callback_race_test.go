package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
)

// TestOneWebhookOneAnswer: a storm of signed callbacks with the same
// finding for a parked review, under different webhook-ids and each
// webhook delivered twice at once and once more after, gets one answer per
// webhook-id: applied for the one that decided the review, refused for the
// others, however the deliveries interleave.
func TestOneWebhookOneAnswer(t *testing.T) {
	t.Parallel()
	h := newHarness(t, repeatStep(async, 60))
	ctx := context.Background()
	for r := range 60 {
		id := fmt.Sprintf("rev-storm-%d", r)
		h.submit(t, id, "c")
		h.workOnce(t, id)
		const webhooks, copies = 4, 2
		answers := make([][]string, webhooks)
		var wg sync.WaitGroup
		deliver := func(w int) string {
			hdr, body := h.signedCallback(id, 1, "accepted", fmt.Sprintf("%s-msg-%d", id, w))
			err := h.HandleCallback(ctx, id, hdr, body)
			switch {
			case err == nil:
				return "applied"
			case errors.Is(err, ErrConflictingCompletion):
				return "conflict"
			default:
				return err.Error()
			}
		}
		var mu sync.Mutex
		for w := range webhooks {
			for range copies {
				wg.Go(func() {
					a := deliver(w)
					mu.Lock()
					answers[w] = append(answers[w], a)
					mu.Unlock()
				})
			}
		}
		wg.Wait()
		applied := 0
		for w := range webhooks {
			answers[w] = append(answers[w], deliver(w))
			for _, a := range answers[w][1:] {
				if a != answers[w][0] {
					t.Fatalf("%s: webhook %d answered %v: one webhook-id, two answers", id, w, answers[w])
				}
			}
			if answers[w][0] == "applied" {
				applied++
			}
		}
		if applied != 1 {
			t.Fatalf("%s: answers %v, want exactly one webhook applied", id, answers)
		}
	}
}

func repeatStep(s step, n int) []step {
	out := make([]step, n)
	for i := range out {
		out[i] = s
	}
	return out
}
