package engine

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/api/engine/provider"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// reply writes one scripted answer for an attempt.
type reply func(w http.ResponseWriter, r *http.Request, svc *Engine)

func status(code int, body string, header ...string) reply {
	return func(w http.ResponseWriter, _ *http.Request, _ *Engine) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(code)
		_, _ = w.Write([]byte(body))
	}
}

func hangAnswer(w http.ResponseWriter, r *http.Request, _ *Engine) { <-r.Context().Done() }

// httpPolicy gives each attempt 2 s: time enough that a loaded machine's
// writes never take an attempt's whole timeout, so that every attempt
// that times out here timed out waiting for the provider.
func httpPolicy() domain.Policy {
	return domain.Policy{Classes: map[string]domain.ClassPolicy{"http": {
		Budget: 20 * time.Second, AttemptTimeout: 2 * time.Second, MaxAttempts: 3,
		Backoff:      domain.Backoff{Initial: 20 * time.Millisecond, Max: 100 * time.Millisecond, Jitter: 10 * time.Millisecond},
		OnExhaustion: domain.ExhaustToManualReview, Priority: 1,
	}}}
}

// The real http provider against a provider server, on real PostgreSQL and
// the wall clock, the engine running, for each answer of the provider
// protocol. Assertions are on the
// recorded history, never on durations.
func TestHTTPProviderIntegration(t *testing.T) {
	t.Parallel()
	signer, _ := provider.NewSigner(testSecret)
	var callbacks sync.WaitGroup
	var mu sync.Mutex
	decided := map[string]chan struct{}{} // closed once its subtest has seen the review decided
	// callback answers 202, then sends the finding by callback: at once
	// (on time), or once the review has been decided by a later attempt
	// (late), an order fixed by events, not by durations.
	callback := func(late bool, state string, wantErr error) reply {
		return func(w http.ResponseWriter, r *http.Request, svc *Engine) {
			id, attempt := r.Header.Get("Idempotency-Key"), r.Header.Get("X-Review-Attempt")
			mu.Lock()
			after := decided[id]
			mu.Unlock()
			w.WriteHeader(http.StatusAccepted)
			w.(http.Flusher).Flush()
			callbacks.Add(1)
			go func() {
				defer callbacks.Done()
				if late {
					<-after
				}
				body := []byte(`{"review_id":"` + id + `","attempt":` + attempt + `,"state":"` + state + `","reasons":["async"]}`)
				hdr := http.Header{}
				signer.SignHeader(hdr, "cb-"+id+"-"+attempt, time.Now(), body)
				if err := svc.HandleCallback(context.Background(), id, hdr, body); !errors.Is(err, wantErr) {
					t.Errorf("callback for %s attempt %s = %v, want %v", id, attempt, err, wantErr)
				}
			}()
		}
	}
	okFor := func(w http.ResponseWriter, r *http.Request, svc *Engine) {
		status(200, `{"review_id":"`+r.Header.Get("Idempotency-Key")+`","state":"accepted","reasons":[]}`)(w, r, svc)
	}
	cases := []struct {
		name    string
		answers []reply
		state   domain.State
		events  []string
	}{
		{"200 valid", []reply{okFor}, domain.StateAccepted,
			[]string{"Submitted", "AttemptStarted", "FindingReceived:accepted:response"}},
		{"200 invalid", []reply{status(200, `{"state":"perhaps"}`)}, domain.StateManualReview,
			[]string{"Submitted", "AttemptStarted", "AttemptTimedOut:invalid_finding", "AttemptStarted", "AttemptTimedOut:invalid_finding", "AttemptStarted", "AttemptTimedOut:invalid_finding", "Escalated:attempts_exhausted"}},
		{"200 mismatched id", []reply{status(200, `{"review_id":"someone-else","state":"accepted"}`), okFor}, domain.StateAccepted,
			[]string{"Submitted", "AttemptStarted", "AttemptTimedOut:invalid_finding", "AttemptStarted", "FindingReceived:accepted:response"}},
		{"202 and a callback on time", []reply{callback(false, "rejected", nil)}, domain.StateRejected,
			[]string{"Submitted", "AttemptStarted", "FindingReceived:rejected:callback"}},
		{"202 and a late callback", []reply{callback(true, "accepted", ErrConflictingCompletion), okFor}, domain.StateAccepted,
			[]string{"Submitted", "AttemptStarted", "AttemptTimedOut:deadline_exceeded", "AttemptStarted", "FindingReceived:accepted:response"}},
		{"429 with Retry-After", []reply{status(429, "", "Retry-After", "1"), okFor}, domain.StateAccepted,
			[]string{"Submitted", "AttemptStarted", "AttemptTimedOut:rate_limited", "AttemptStarted", "FindingReceived:accepted:response"}},
		{"503", []reply{status(503, ""), okFor}, domain.StateAccepted,
			[]string{"Submitted", "AttemptStarted", "AttemptTimedOut:provider_unavailable", "AttemptStarted", "FindingReceived:accepted:response"}},
		{"400", []reply{status(400, `{"error":"no"}`)}, domain.StateManualReview,
			[]string{"Submitted", "AttemptStarted", "AttemptTimedOut:provider_refused", "Escalated:provider_refused"}},
		{"500", []reply{status(500, "")}, domain.StateManualReview,
			[]string{"Submitted", "AttemptStarted", "AttemptTimedOut:provider_unavailable", "AttemptStarted", "AttemptTimedOut:provider_unavailable", "AttemptStarted", "AttemptTimedOut:provider_unavailable", "Escalated:attempts_exhausted"}},
		{"hang past the timeout", []reply{hangAnswer}, domain.StateManualReview,
			[]string{"Submitted", "AttemptStarted", "AttemptTimedOut:deadline_exceeded", "AttemptStarted", "AttemptTimedOut:deadline_exceeded", "AttemptStarted", "AttemptTimedOut:deadline_exceeded", "Escalated:attempts_exhausted"}},
	}
	var svc *Engine
	keys := map[string][]string{} // review -> Idempotency-Key per attempt
	script := map[string][]reply{}
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
	svc, led, closeSvc, err := pgEngine(context.Background(), dbtest.URL(t), httpProvider, func(c *Config) {
		c.Policy, c.Signer, c.RetryBudget, c.PollInterval = httpPolicy(), signer, 1, 20*time.Millisecond
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeSvc)
	running(t, svc)
	for i, c := range cases {
		id := "http-" + strconv.Itoa(i)
		script[id], decided[id] = c.answers, make(chan struct{})
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if _, _, err := svc.Submit(context.Background(), SubmitRequest{ReviewID: id, ContentClass: "http", ContentType: "text/plain", Content: []byte("x")}); err != nil {
				t.Fatal(err)
			}
			rv := settled(t, led, id)
			close(decided[id])
			callbacks.Wait()
			if rv.State() != c.state {
				t.Errorf("state = %s, want %s", rv.State(), c.state)
			}
			if got := eventTypes(t, led, id); !slices.Equal(got, c.events) {
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
				evs := historyEvents(t, led, id)
				timedOut, ok1 := evs[2].(domain.AttemptTimedOut)
				next, ok2 := evs[3].(domain.AttemptStarted)
				if !ok1 || !ok2 || timedOut.RetryAfterMS != 1000 || next.StartedAt.Sub(timedOut.At) < time.Second {
					t.Errorf("retry-after %dms, next attempt %s after", timedOut.RetryAfterMS, next.StartedAt.Sub(timedOut.At))
				}
			}
		})
	}
}
