package runner

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/api/provider"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/pgstore"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

func fastPolicy() domain.Policy {
	return domain.Policy{Classes: map[string]domain.ClassPolicy{"fast": {
		Budget: 3 * time.Second, AttemptTimeout: 300 * time.Millisecond, MaxAttempts: 3,
		Backoff:      domain.Backoff{Initial: 20 * time.Millisecond, Max: 100 * time.Millisecond, Jitter: 10 * time.Millisecond},
		OnExhaustion: domain.ExhaustToManualReview, Priority: 1,
	}}}
}

// answer writes one scripted answer for an attempt.
type answer func(w http.ResponseWriter, r *http.Request, svc *Service)

func status(code int, body string, header ...string) answer {
	return func(w http.ResponseWriter, _ *http.Request, _ *Service) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(code)
		_, _ = w.Write([]byte(body))
	}
}

func hangAnswer(w http.ResponseWriter, r *http.Request, _ *Service) { <-r.Context().Done() }

// The real http provider against a provider server, on real PostgreSQL and
// the wall clock, for each answer of DESIGN 5.4. Assertions are on the
// recorded history, never on durations.
func TestHTTPProviderIntegration(t *testing.T) {
	t.Parallel()
	signer, _ := provider.NewSigner(testSecret)
	var callbacks sync.WaitGroup
	callback := func(delay time.Duration, state string, wantErr error) answer {
		return func(w http.ResponseWriter, r *http.Request, svc *Service) {
			id, attempt := r.Header.Get("Idempotency-Key"), r.Header.Get("X-Review-Attempt")
			callbacks.Add(1)
			go func() {
				defer callbacks.Done()
				time.Sleep(delay) // the provider's own pace, outside the runner
				body := []byte(`{"review_id":"` + id + `","attempt":` + attempt + `,"state":"` + state + `","reasons":["async"]}`)
				hdr := http.Header{}
				signer.SignHeader(hdr, "cb-"+id+"-"+attempt, time.Now(), body)
				if err := svc.HandleCallback(context.Background(), id, hdr, body); !errors.Is(err, wantErr) {
					t.Errorf("callback for %s attempt %s = %v, want %v", id, attempt, err, wantErr)
				}
			}()
			w.WriteHeader(http.StatusAccepted)
		}
	}
	okFor := func(w http.ResponseWriter, r *http.Request, svc *Service) {
		status(200, `{"review_id":"`+r.Header.Get("Idempotency-Key")+`","state":"accepted","reasons":[]}`)(w, r, svc)
	}
	cases := []struct {
		name    string
		answers []answer
		state   domain.State
		events  []string
	}{
		{"200 valid", []answer{okFor}, domain.StateAccepted,
			[]string{"Submitted", "AttemptStarted", "FindingReceived:accepted:response"}},
		{"200 invalid", []answer{status(200, `{"state":"perhaps"}`)}, domain.StateManualReview,
			[]string{"Submitted", "AttemptStarted", "AttemptTimedOut:invalid_finding", "AttemptStarted", "AttemptTimedOut:invalid_finding", "AttemptStarted", "AttemptTimedOut:invalid_finding", "Escalated:attempts_exhausted"}},
		{"200 mismatched id", []answer{status(200, `{"review_id":"someone-else","state":"accepted"}`), okFor}, domain.StateAccepted,
			[]string{"Submitted", "AttemptStarted", "AttemptTimedOut:invalid_finding", "AttemptStarted", "FindingReceived:accepted:response"}},
		{"202 and a callback on time", []answer{callback(50*time.Millisecond, "rejected", nil)}, domain.StateRejected,
			[]string{"Submitted", "AttemptStarted", "FindingReceived:rejected:callback"}},
		{"202 and a late callback", []answer{callback(600*time.Millisecond, "accepted", ErrConflictingCompletion), okFor}, domain.StateAccepted,
			[]string{"Submitted", "AttemptStarted", "AttemptTimedOut:deadline_exceeded", "AttemptStarted", "FindingReceived:accepted:response"}},
		{"429 with Retry-After", []answer{status(429, "", "Retry-After", "1"), okFor}, domain.StateAccepted,
			[]string{"Submitted", "AttemptStarted", "AttemptTimedOut:rate_limited", "AttemptStarted", "FindingReceived:accepted:response"}},
		{"503", []answer{status(503, ""), okFor}, domain.StateAccepted,
			[]string{"Submitted", "AttemptStarted", "AttemptTimedOut:provider_unavailable", "AttemptStarted", "FindingReceived:accepted:response"}},
		{"400", []answer{status(400, `{"error":"no"}`)}, domain.StateManualReview,
			[]string{"Submitted", "AttemptStarted", "AttemptTimedOut:provider_refused", "Escalated:provider_refused"}},
		{"500", []answer{status(500, "")}, domain.StateManualReview,
			[]string{"Submitted", "AttemptStarted", "AttemptTimedOut:provider_unavailable", "AttemptStarted", "AttemptTimedOut:provider_unavailable", "AttemptStarted", "AttemptTimedOut:provider_unavailable", "Escalated:attempts_exhausted"}},
		{"hang past the timeout", []answer{hangAnswer}, domain.StateManualReview,
			[]string{"Submitted", "AttemptStarted", "AttemptTimedOut:deadline_exceeded", "AttemptStarted", "AttemptTimedOut:deadline_exceeded", "AttemptStarted", "AttemptTimedOut:deadline_exceeded", "Escalated:attempts_exhausted"}},
	}
	pool := dbtest.Pool(t)
	store := pgstore.New(pool, pgstore.Config{})
	t.Cleanup(store.Close)
	led := ledger.New(store)
	var svc *Service
	var mu sync.Mutex
	keys := map[string][]string{} // review -> Idempotency-Key per attempt
	script := map[string][]answer{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			ReviewID string `json:"review_id"`
			Attempt  int    `json:"attempt"`
		}
		raw, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(raw, &body)
		id := body.ReviewID
		n, _ := strconv.Atoi(r.Header.Get("X-Review-Attempt"))
		if n != body.Attempt {
			t.Errorf("X-Review-Attempt %d, body attempt %d", n, body.Attempt)
		}
		mu.Lock()
		keys[id] = append(keys[id], r.Header.Get("Idempotency-Key"))
		as := script[id]
		mu.Unlock()
		as[min(n, len(as))-1](w, r, svc)
	}))
	t.Cleanup(srv.Close)
	httpProvider, err := provider.NewHTTP(provider.HTTPConfig{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	svc, err = New(Config{Policy: fastPolicy(), Ledger: led, Pool: pool, Provider: httpProvider, Signer: signer,
		Logger: slog.New(slog.DiscardHandler), RetryBudget: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.closePub() })
	h := &harness{Service: svc, ledger: led}
	for i, c := range cases {
		id := "http-" + strconv.Itoa(i)
		script[id] = c.answers
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if _, _, err := svc.Submit(context.Background(), SubmitRequest{ReviewID: id, ContentClass: "fast", ContentType: "text/plain", Content: []byte("x")}); err != nil {
				t.Fatal(err)
			}
			if err := svc.Review(context.Background(), id); err != nil {
				t.Fatal(err)
			}
			callbacks.Wait()
			rv := h.load(t, id)
			if rv.State() != c.state {
				t.Errorf("state = %s, want %s", rv.State(), c.state)
			}
			if got := h.types(t, id); !slices.Equal(got, c.events) {
				t.Errorf("events:\n got %v\nwant %v", got, c.events)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, k := range keys[id] {
				if k != id {
					t.Errorf("Idempotency-Key %q, want %q on every attempt", k, id)
				}
			}
			if c.name == "429 with Retry-After" {
				evs := h.events(t, id)
				timedOut, ok1 := evs[2].(domain.AttemptTimedOut)
				next, ok2 := evs[3].(domain.AttemptStarted)
				if !ok1 || !ok2 || timedOut.RetryAfterMS != 1000 || next.StartedAt.Sub(timedOut.At) < time.Second {
					t.Errorf("retry-after %dms, next attempt %s after", timedOut.RetryAfterMS, next.StartedAt.Sub(timedOut.At))
				}
			}
		})
	}
}
