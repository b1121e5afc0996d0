package client

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/reviewledger/reviewledger/api/engine/provider"
)

var receiverSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("receiver-test-key-0123456789"))

const eventBody = `{"type":"review.decided","timestamp":"2026-01-01T00:00:03Z","data":{"review_id":"r1","state":"accepted","content_class":"c","attempts":1,"version":2,"submitted_at":"2026-01-01T00:00:00Z","deadline":"2026-01-01T00:00:30Z","decided_at":"2026-01-01T00:00:03Z","reasons":[]}}`

// signed is a webhook request signed as reviewledger's notifier signs it
// (provider.Signer).
func signed(t *testing.T, id string, at time.Time, body string) *http.Request {
	t.Helper()
	s, err := provider.NewSigner(receiverSecret)
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodPost, "/webhooks", strings.NewReader(body))
	s.SignHeader(req.Header, id, at, []byte(body))
	return req
}

func newTestReceiver(t *testing.T, now time.Time) *Receiver {
	t.Helper()
	r, err := NewReceiver(ReceiverConfig{Secret: receiverSecret, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestVerify(t *testing.T) {
	now := time.Now()
	r := newTestReceiver(t, now)
	if id, err := r.Verify(signed(t, "msg-1", now, eventBody).Header, []byte(eventBody)); err != nil || id != "msg-1" {
		t.Fatalf("Verify of the notifier's signature: %q, %v", id, err)
	}
	// Signed by the Standard Webhooks reference library, with a second
	// signature the receiver does not know first, as during a key rotation.
	wh, err := standardwebhooks.NewWebhook(receiverSecret)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := wh.Sign("msg-2", now, []byte(eventBody))
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set("webhook-id", "msg-2")
	h.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
	h.Set("webhook-signature", "v1,c29tZXRoaW5nIGVsc2U= "+sig)
	if _, err := r.Verify(h, []byte(eventBody)); err != nil {
		t.Fatalf("Verify of the reference library's signature: %v", err)
	}
	for name, mod := range map[string]func(h http.Header) []byte{
		"tampered body": func(http.Header) []byte { return []byte(strings.Replace(eventBody, "accepted", "rejected", 1)) },
		"other id":      func(h http.Header) []byte { h.Set("webhook-id", "msg-3"); return []byte(eventBody) },
		"stale": func(h http.Header) []byte {
			h.Set("webhook-timestamp", strconv.FormatInt(now.Add(-6*time.Minute).Unix(), 10))
			return []byte(eventBody)
		},
		"future": func(h http.Header) []byte {
			h.Set("webhook-timestamp", strconv.FormatInt(now.Add(6*time.Minute).Unix(), 10))
			return []byte(eventBody)
		},
		"no signature": func(h http.Header) []byte { h.Del("webhook-signature"); return []byte(eventBody) },
		"v2 only": func(h http.Header) []byte {
			h.Set("webhook-signature", strings.Replace(h.Get("webhook-signature"), "v1,", "v2,", 1))
			return []byte(eventBody)
		},
		"not a timestamp": func(h http.Header) []byte { h.Set("webhook-timestamp", "soon"); return []byte(eventBody) },
	} {
		req := signed(t, "msg-1", now, eventBody)
		body := mod(req.Header)
		if _, err := r.Verify(req.Header, body); !errors.Is(err, ErrInvalidSignature) {
			t.Errorf("%s: %v, want ErrInvalidSignature", name, err)
		}
	}
	if _, err := NewReceiver(ReceiverConfig{Secret: strings.TrimPrefix(receiverSecret, "whsec_")}); !errors.Is(err, ErrInvalidConfig) || strings.Contains(err.Error(), receiverSecret[6:]) {
		t.Errorf("a secret without whsec_: %v", err)
	}
}

func TestHandlerDeduplicates(t *testing.T) {
	now := time.Now()
	r := newTestReceiver(t, now)
	var mu sync.Mutex
	var handled []Event
	fail := true
	h := r.Handler(func(_ context.Context, e Event) error {
		mu.Lock()
		defer mu.Unlock()
		if fail {
			fail = false
			return errors.New("database down")
		}
		handled = append(handled, e)
		return nil
	})
	serve := func(req *http.Request) int {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	if code := serve(signed(t, "msg-1", now, eventBody)); code != http.StatusInternalServerError {
		t.Fatalf("a failing handler: %d, want 500 so that it is sent again", code)
	}
	if code := serve(signed(t, "msg-1", now, eventBody)); code != http.StatusNoContent {
		t.Fatalf("the redelivery after a failure: %d", code)
	}
	if code := serve(signed(t, "msg-1", now.Add(time.Second), eventBody)); code != http.StatusOK {
		t.Fatalf("a redelivery: %d", code)
	}
	if len(handled) != 1 {
		t.Fatalf("handled %d times", len(handled))
	}
	e := handled[0]
	if e.ID != "msg-1" || e.Type != EventDecided || e.Review.ReviewID != "r1" || e.Review.State != StateAccepted || e.Review.Version != 2 || !e.Timestamp.Equal(time.Date(2026, 1, 1, 0, 0, 3, 0, time.UTC)) {
		t.Errorf("event %+v", e)
	}
	bad := signed(t, "msg-2", now, eventBody)
	bad.Header.Set("webhook-signature", "v1,AAAA")
	if code := serve(bad); code != http.StatusUnauthorized {
		t.Errorf("a bad signature: %d", code)
	}
	if code := serve(httptest.NewRequest(http.MethodGet, "/webhooks", nil)); code != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d", code)
	}
	if len(handled) != 1 {
		t.Errorf("handled %d times", len(handled))
	}
}

// A redelivery arriving while the first delivery is being handled is
// told to come back: the event is handled once.
func TestHandlerConcurrentRedelivery(t *testing.T) {
	now := time.Now()
	r := newTestReceiver(t, now)
	inside, release := make(chan struct{}), make(chan struct{})
	h := r.Handler(func(context.Context, Event) error {
		close(inside)
		<-release
		return nil
	})
	first := make(chan int)
	go func() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, signed(t, "msg-1", now, eventBody))
		first <- rec.Code
	}()
	<-inside
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, signed(t, "msg-1", now, eventBody))
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Errorf("a concurrent redelivery: %d %v", rec.Code, rec.Header())
	}
	close(release)
	if code := <-first; code != http.StatusNoContent {
		t.Errorf("the first delivery: %d", code)
	}
}

func TestMemorySeenForgets(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := NewMemorySeen(time.Hour)
	m.now = func() time.Time { return now }
	ctx := context.Background()
	_ = m.Mark(ctx, "a")
	now = now.Add(30 * time.Minute)
	_ = m.Mark(ctx, "b")
	if seen, _ := m.Seen(ctx, "a"); !seen {
		t.Error("a forgotten within its hour")
	}
	now = now.Add(31 * time.Minute)
	if seen, _ := m.Seen(ctx, "a"); seen {
		t.Error("a remembered after its hour")
	}
	_ = m.Mark(ctx, "c") // forgets a
	if seen, _ := m.Seen(ctx, "b"); !seen || m.Len() != 2 {
		t.Errorf("b seen %v, %d held", seen, m.Len())
	}
	now = now.Add(2 * time.Hour)
	_ = m.Mark(ctx, "d")
	if m.Len() != 1 {
		t.Errorf("%d held after every other expired", m.Len())
	}
}
