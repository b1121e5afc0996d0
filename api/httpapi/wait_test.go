package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

func withWatcher(_ *Config, d *Deps) {
	if l, ok := d.Ledger.(*ledger.Ledger); ok {
		d.Watcher = l.Watcher()
	}
}

// waitFor runs a GET with ?wait in the background.
func (h *harness) waitFor(path string) <-chan *httptest.ResponseRecorder {
	out := make(chan *httptest.ResponseRecorder, 1)
	go func() { out <- h.do("GET", path, submitterToken, "") }()
	return out
}

func (h *harness) waiters(t *testing.T, n int) {
	t.Helper()
	clocktest.EventuallyShows(t, fmt.Sprintf("%d waiters", n), func() (bool, string) {
		got := h.ledger.Watcher().Waiting()
		return got == n, fmt.Sprintf("%d waiters", got)
	})
}

// A long-poll answers as soon as the review leaves pending, whoever moved
// it: through this process's ledger, or another process's (Follow).
func TestWaitAnswersWhenTheReviewLeavesPending(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withWatcher)
	h.submit("wait-1", "caption_suggestion", "text")
	got := h.waitFor("/v1/reviews/wait-1?wait=30s")
	h.waiters(t, 1)
	h.escalate("wait-1", domain.ReasonAttemptsExhausted)
	select {
	case rec := <-got:
		if rec.Code != http.StatusOK || decode[reviewView](t, rec).State != "manual_review" {
			t.Fatalf("answer %d %s", rec.Code, rec.Body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not woken by the escalation")
	}

	// Another process's ledger on the same store: woken through the
	// global order.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = h.ledger.Watcher().Follow(ctx, 10*time.Millisecond) }()
	clocktest.Eventually(t, "Follow following", h.ledger.Watcher().Following)
	h.submit("wait-2", "caption_suggestion", "text")
	got = h.waitFor("/v1/reviews/wait-2?wait=30")
	h.waiters(t, 1)
	elsewhere := ledger.New(h.store)
	rv, err := elsewhere.Load(ctx, "wait-2")
	if err != nil {
		t.Fatal(err)
	}
	esc, _ := rv.Escalate(domain.ReasonCancelled, "", h.now)
	if _, err := elsewhere.Append(ctx, rv, ledger.Actor{Name: "other"}, esc); err != nil {
		t.Fatal(err)
	}
	select {
	case rec := <-got:
		if decode[reviewView](t, rec).State != "manual_review" {
			t.Fatalf("answer %d %s", rec.Code, rec.Body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not woken by another process's escalation")
	}
}

// A change that leaves the review pending (an attempt starting) does not
// end the wait; the wait's end answers the pending view.
func TestWaitEndsWithThePendingView(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withWatcher)
	h.submit("wait-3", "caption_suggestion", "text")
	got := h.waitFor("/v1/reviews/wait-3?wait=300ms")
	h.waiters(t, 1)
	rv, err := h.ledger.Load(context.Background(), "wait-3")
	if err != nil {
		t.Fatal(err)
	}
	st, _ := rv.StartAttempt(h.now)
	if _, err := h.ledger.Append(context.Background(), rv, ledger.Actor{Name: "engine"}, st); err != nil {
		t.Fatal(err)
	}
	rec := <-got
	if v := decode[reviewView](t, rec); rec.Code != http.StatusOK || v.State != "pending" || v.Attempts != 1 {
		t.Fatalf("answer %d %s, want the pending view after the attempt started", rec.Code, rec.Body)
	}
	if n := h.ledger.Watcher().Waiting(); n != 0 {
		t.Errorf("%d waiters left", n)
	}
}

func TestWaitRefusesABadWait(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withWatcher)
	h.submit("wait-4", "caption_suggestion", "text")
	for _, q := range []string{"61s", "-1s", "soon", "1e9", "NaN", "Inf", "-Inf"} {
		wantProblem(t, h.do("GET", "/v1/reviews/wait-4?wait="+q, submitterToken, ""), http.StatusBadRequest, "invalid-request", "wait")
	}
	// No wait, or a decided review, answers at once.
	if rec := h.do("GET", "/v1/reviews/wait-4?wait=0s", submitterToken, ""); rec.Code != http.StatusOK {
		t.Fatalf("wait=0s: %d %s", rec.Code, rec.Body)
	}
	wantProblem(t, h.do("GET", "/v1/reviews/nope?wait=5s", submitterToken, ""), http.StatusNotFound, "review-not-found", "")
}

// submitWaiting runs a submit with ?wait in the background.
func (h *harness) submitWaiting(query, id string) <-chan *httptest.ResponseRecorder {
	out := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		out <- h.do("POST", "/v1/reviews"+query, submitterToken, submitJSON(id, "caption_suggestion", "text"))
	}()
	return out
}

// A submit with ?wait answers, with the submit's own status, once the
// review leaves pending; the review was stored before the wait began.
func TestSubmitWaitAnswersWhenTheReviewLeavesPending(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withWatcher)
	got := h.submitWaiting("?wait=30s", "swait-1")
	h.waiters(t, 1) // the watch is set before the submit is made: wait for the review
	clocktest.EventuallyShows(t, "the submit's review stored while it waits", func() (bool, string) {
		rec := h.do("GET", "/v1/reviews/swait-1", submitterToken, "")
		switch rec.Code {
		case http.StatusOK:
			if v := decode[reviewView](t, rec); v.State != "pending" {
				t.Fatalf("while the submit waits: %+v, want the stored pending review", v)
			}
			return true, ""
		case http.StatusNotFound:
			return false, fmt.Sprintf("%d %s", rec.Code, rec.Body)
		}
		t.Fatalf("while the submit waits: %d %s, want the stored pending review", rec.Code, rec.Body)
		return false, ""
	})
	if n := h.ledger.Watcher().Waiting(); n != 1 {
		t.Fatalf("%d waiters once the review is stored, want the submit's", n)
	}
	h.escalate("swait-1", domain.ReasonAttemptsExhausted)
	select {
	case rec := <-got:
		if v := decode[reviewView](t, rec); rec.Code != http.StatusAccepted || v.State != "manual_review" || v.ReviewID != "swait-1" {
			t.Fatalf("answer %d %s, want 202 with the manual_review view", rec.Code, rec.Body)
		}
		if loc := rec.Header().Get("Location"); loc != "/v1/reviews/swait-1" {
			t.Errorf("Location %q", loc)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting submit was not woken by the escalation")
	}
	// The same review again: 200 at once, it is no longer pending.
	select {
	case rec := <-h.submitWaiting("?wait=30s", "swait-1"):
		if rec.Code != http.StatusOK || decode[reviewView](t, rec).State != "manual_review" {
			t.Fatalf("again: %d %s, want 200 with the manual_review view", rec.Code, rec.Body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("submitting a review no longer pending waited")
	}
	if n := h.ledger.Watcher().Waiting(); n != 0 {
		t.Errorf("%d waiters left", n)
	}
}

// A submit's wait that ends first answers the pending view; a bad wait is
// refused before anything is stored.
func TestSubmitWaitEndsWithThePendingView(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withWatcher)
	rec := <-h.submitWaiting("?wait=200ms", "swait-2")
	if v := decode[reviewView](t, rec); rec.Code != http.StatusAccepted || v.State != "pending" {
		t.Fatalf("answer %d %s, want 202 with the pending view", rec.Code, rec.Body)
	}
	if n := h.ledger.Watcher().Waiting(); n != 0 {
		t.Errorf("%d waiters left", n)
	}
	for _, q := range []string{"61s", "-1s", "soon", "NaN", "+Inf"} {
		wantProblem(t, <-h.submitWaiting("?wait="+q, "swait-3"), http.StatusBadRequest, "invalid-request", "wait")
	}
	wantProblem(t, h.do("GET", "/v1/reviews/swait-3", submitterToken, ""), http.StatusNotFound, "review-not-found", "")
}

// failingLoads is a ledger whose reads fail, as while the database is out.
type failingLoads struct{ Ledger }

func (failingLoads) Load(context.Context, string) (*ledger.Snapshot, error) {
	return nil, errors.New("database unavailable")
}

// A submit whose review cannot be read again when its wait ends answers
// with the view it had, not an error: the review is stored.
func TestSubmitWaitAnswersWhenTheLastReadFails(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withWatcher, func(_ *Config, d *Deps) { d.Ledger = failingLoads{d.Ledger} })
	rec := <-h.submitWaiting("?wait=100ms", "swait-4")
	if v := decode[reviewView](t, rec); rec.Code != http.StatusAccepted || v.State != "pending" || v.ReviewID != "swait-4" {
		t.Fatalf("answer %d %s, want 202 with the pending view", rec.Code, rec.Body)
	}
}
