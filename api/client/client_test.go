package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeServer answers with the statuses of answers in turn, the last one
// again once they run out, and records the requests' bodies and URLs.
type fakeServer struct {
	t   *testing.T
	srv *httptest.Server

	mu      sync.Mutex
	answers []func(w http.ResponseWriter)
	bodies  []string
	urls    []string
}

func newFakeServer(t *testing.T, answers ...func(w http.ResponseWriter)) *fakeServer {
	f := &fakeServer{t: t, answers: answers}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.bodies = append(f.bodies, string(b))
		f.urls = append(f.urls, r.URL.String())
		answer := f.answers[min(len(f.bodies), len(f.answers))-1]
		f.mu.Unlock()
		answer(w)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeServer) client(t *testing.T) *Client {
	t.Helper()
	c, err := New(Config{BaseURL: f.srv.URL, Token: "tok", BackoffInitial: time.Millisecond, BackoffMax: 5 * time.Millisecond, WaitStep: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func answer(status int, body string, header ...string) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

func hangUp(w http.ResponseWriter) {
	conn, _, _ := w.(http.Hijacker).Hijack()
	_ = conn.Close()
}

const reviewJSON = `{"review_id":"r1","state":"%s","content_class":"c","attempts":1,"version":%d,"submitted_at":"2026-01-01T00:00:00Z","deadline":"2026-01-01T00:00:30Z","decided_at":null,"reasons":[]}`

func view(state string, version int) string {
	return fmt.Sprintf(reviewJSON, state, version)
}

func TestSubmitRetriesWithTheSameReview(t *testing.T) {
	f := newFakeServer(t,
		hangUp,
		answer(http.StatusServiceUnavailable, `{"status":503}`, "Retry-After", "0"),
		answer(http.StatusTooManyRequests, `{"status":429}`),
		answer(http.StatusOK, view("pending", 1)), // created by a try whose answer was lost
	)
	r, created, err := f.client(t).Submit(context.Background(), Submission{ReviewID: "r1", ContentClass: "c", ContentType: "text/plain", Content: "x"})
	if err != nil || created || r.ReviewID != "r1" || r.State != StatePending {
		t.Fatalf("Submit: %+v, %v, %v", r, created, err)
	}
	if len(f.bodies) != 4 {
		t.Fatalf("%d tries, want 4", len(f.bodies))
	}
	for _, b := range f.bodies {
		if b != f.bodies[0] || !strings.Contains(b, `"review_id":"r1"`) {
			t.Errorf("tries sent %q and %q", f.bodies[0], b)
		}
	}
}

func TestSubmitCreated(t *testing.T) {
	f := newFakeServer(t, answer(http.StatusAccepted, view("pending", 0)))
	if _, created, err := f.client(t).Submit(context.Background(), Submission{ReviewID: "r1"}); err != nil || !created {
		t.Fatalf("Submit: %v, %v", created, err)
	}
}

func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func(http.ResponseWriter)
		kind   error
		field  string
		tries  int
	}{
		{"not found", answer(404, `{"type":"urn:reviewledger:problem:review-not-found","title":"Review not found","status":404}`), ErrNotFound, "", 1},
		{"conflict", answer(409, `{"type":"urn:reviewledger:problem:review-exists","status":409}`), ErrConflict, "", 1},
		{"invalid", answer(400, `{"type":"urn:reviewledger:problem:invalid-review-id","status":400,"field":"review_id"}`), ErrInvalid, "review_id", 1},
		{"unknown class", answer(422, `{"status":422,"field":"content_class"}`), ErrInvalid, "content_class", 1},
		{"forbidden", answer(403, `{"status":403}`), ErrUnauthorized, "", 1},
		{"unavailable, every try", answer(503, `{"status":503}`), ErrUnavailable, "", 6},
		{"not a problem body", answer(502, `<html>`), ErrUnavailable, "", 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeServer(t, tc.answer)
			_, err := f.client(t).Get(context.Background(), "r1")
			var e *Error
			if !errors.Is(err, tc.kind) || !errors.As(err, &e) || e.Field != tc.field {
				t.Fatalf("Get: %v (%+v), want %v with field %q", err, e, tc.kind, tc.field)
			}
			if len(f.bodies) != tc.tries {
				t.Errorf("%d tries, want %d", len(f.bodies), tc.tries)
			}
		})
	}
}

func TestWaitAsksAgainUntilDecided(t *testing.T) {
	f := newFakeServer(t,
		answer(http.StatusOK, view("pending", 1)),
		answer(http.StatusServiceUnavailable, `{"status":503}`),
		hangUp,
		answer(http.StatusOK, view("pending", 1)),
		answer(http.StatusOK, view("manual_review", 2)),
	)
	r, err := f.client(t).Wait(context.Background(), "r1")
	if err != nil || r.State != StateManualReview || r.Version != 2 {
		t.Fatalf("Wait: %+v, %v", r, err)
	}
	for _, u := range f.urls {
		if u != "/v1/reviews/r1?wait=1s" {
			t.Errorf("asked %s", u)
		}
	}
	if len(f.urls) != 5 {
		t.Errorf("%d requests, want 5", len(f.urls))
	}
}

// SubmitAndWait asks the submit to wait, retries it with the same body,
// and goes on waiting when the submit's wait ended first.
func TestSubmitAndWaitGoesOnWaiting(t *testing.T) {
	f := newFakeServer(t,
		answer(http.StatusServiceUnavailable, `{"status":503}`),
		answer(http.StatusAccepted, view("pending", 1)),
		answer(http.StatusOK, view("accepted", 2)),
	)
	r, created, err := f.client(t).SubmitAndWait(context.Background(), Submission{ReviewID: "r1", ContentClass: "c", ContentType: "text/plain", Content: "x"})
	if err != nil || !created || r.State != StateAccepted || r.Version != 2 {
		t.Fatalf("SubmitAndWait: %+v, created %v, %v", r, created, err)
	}
	want := []string{"/v1/reviews?wait=1s", "/v1/reviews?wait=1s", "/v1/reviews/r1?wait=1s"}
	if strings.Join(f.urls, " ") != strings.Join(want, " ") {
		t.Errorf("asked %v, want %v", f.urls, want)
	}
	if f.bodies[0] == "" || f.bodies[0] != f.bodies[1] {
		t.Errorf("retried with another body: %q, %q", f.bodies[0], f.bodies[1])
	}

	// Decided within the submit's wait: one round trip.
	f = newFakeServer(t, answer(http.StatusOK, view("rejected", 3)))
	r, created, err = f.client(t).SubmitAndWait(context.Background(), Submission{ReviewID: "r1", ContentClass: "c", ContentType: "text/plain", Content: "x"})
	if err != nil || created || r.State != StateRejected || len(f.urls) != 1 {
		t.Fatalf("SubmitAndWait: %+v, created %v, %v after %d requests", r, created, err, len(f.urls))
	}
}

func TestWaitEndsWithItsContext(t *testing.T) {
	f := newFakeServer(t, answer(http.StatusOK, view("pending", 1)))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := f.client(t).Wait(ctx, "r1"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait: %v", err)
	}
	f2 := newFakeServer(t, answer(http.StatusNotFound, `{"status":404}`))
	if _, err := f2.client(t).Wait(context.Background(), "r1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Wait of an unknown review: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg   Config
		field string
	}{
		{Config{Token: "t"}, "BaseURL"},
		{Config{BaseURL: "ftp://x", Token: "t"}, "BaseURL"},
		{Config{BaseURL: "http://x"}, "Token"},
		{Config{BaseURL: "http://x", Token: "t", WaitStep: 2 * time.Minute}, "WaitStep"},
		{Config{BaseURL: "http://x", Token: "t", HTTPClient: &http.Client{Timeout: 10 * time.Second}}, "HTTPClient.Timeout"},
	} {
		if _, err := New(tc.cfg); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field+":") {
			t.Errorf("New(%+v): %v, want an error naming %s", tc.cfg, err, tc.field)
		}
	}
}

// A review's JSON decodes into Review field by field.
func TestReviewDecodes(t *testing.T) {
	var r Review
	raw := `{"review_id":"r1","state":"accepted","content_class":"c","attempts":2,"version":4,"submitted_at":"2026-01-01T00:00:00Z","deadline":"2026-01-01T00:00:30Z","decided_at":"2026-01-01T00:00:03Z","reasons":["ok"]}`
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		t.Fatal(err)
	}
	back, _ := json.Marshal(r)
	if string(back) != raw {
		t.Errorf("round trip:\n%s\n%s", back, raw)
	}
	if !r.State.Final() || StateManualReview.Final() {
		t.Error("Final")
	}
}
