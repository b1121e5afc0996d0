package main

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// providerCall is one request the provider received.
type providerCall struct {
	IdempotencyKey string
	Attempt        string // X-Review-Attempt
	ContentType    string
	Traceparent    string
	Body           map[string]any
}

// step answers one attempt.
type step func(p *scriptedProvider, w http.ResponseWriter, r *http.Request, reviewID string, attempt int)

// scriptedProvider is a docs/contracts.md §4 provider whose answers each test
// scripts per review: the n-th step answers attempt n, the last step every
// attempt after it. Unscripted reviews are accepted.
type scriptedProvider struct {
	t      *testing.T
	srv    *httptest.Server
	closed chan struct{}

	mu        sync.Mutex
	target    string // the server's URL, for callbacks
	scripts   map[string][]step
	calls     map[string][]providerCall
	callbacks map[string][]int // statuses the server answered to callbacks
	cancelled map[string]int   // hanging requests the caller gave up on

	conflicts atomic.Int64 // callbacks answered 409
}

func newScriptedProvider(t *testing.T) *scriptedProvider {
	p := &scriptedProvider{
		t: t, closed: make(chan struct{}),
		scripts: map[string][]step{}, calls: map[string][]providerCall{}, callbacks: map[string][]int{},
		cancelled: map[string]int{},
	}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serveHTTP))
	t.Cleanup(func() {
		close(p.closed)
		p.srv.Close()
	})
	return p
}

func (p *scriptedProvider) URL() string { return p.srv.URL + "/moderate" }

func (p *scriptedProvider) setTarget(url string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = url
}

// script sets the answers for a review's attempts.
func (p *scriptedProvider) script(reviewID string, steps ...step) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.scripts[reviewID] = steps
}

// seen returns the requests received for a review.
func (p *scriptedProvider) seen(reviewID string) []providerCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.calls[reviewID])
}

// callbackStatuses returns the statuses of the callbacks sent for a review.
func (p *scriptedProvider) callbackStatuses(reviewID string) []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.callbacks[reviewID])
}

func (p *scriptedProvider) serveHTTP(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	var body map[string]any
	if r.Method != http.MethodPost || r.URL.Path != "/moderate" || json.Unmarshal(raw, &body) != nil {
		http.Error(w, "unexpected request", http.StatusTeapot)
		return
	}
	id, _ := body["review_id"].(string)
	attempt, _ := strconv.Atoi(r.Header.Get("X-Review-Attempt"))
	p.mu.Lock()
	p.calls[id] = append(p.calls[id], providerCall{
		IdempotencyKey: r.Header.Get("Idempotency-Key"),
		Attempt:        r.Header.Get("X-Review-Attempt"),
		ContentType:    r.Header.Get("Content-Type"),
		Traceparent:    r.Header.Get("traceparent"),
		Body:           body,
	})
	steps := p.scripts[id]
	p.mu.Unlock()
	s := accept()
	if len(steps) > 0 {
		s = steps[min(max(attempt, 1), len(steps))-1]
	}
	s(p, w, r, id, attempt)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// finding answers 200 with a complete finding.
func finding(state string, reasons ...string) step {
	return func(_ *scriptedProvider, w http.ResponseWriter, _ *http.Request, id string, _ int) {
		writeJSON(w, http.StatusOK, map[string]any{"review_id": id, "state": state, "reasons": append([]string{}, reasons...)})
	}
}

func accept() step { return finding("accepted", "looks fine") }

// answer200 answers 200 with body, whatever it is.
func answer200(body func(id string) any) step {
	return func(_ *scriptedProvider, w http.ResponseWriter, _ *http.Request, id string, _ int) {
		writeJSON(w, http.StatusOK, body(id))
	}
}

// status answers code, with Retry-After when retryAfter is set.
func status(code int, retryAfter string) step {
	return func(_ *scriptedProvider, w http.ResponseWriter, _ *http.Request, _ string, _ int) {
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		writeJSON(w, code, map[string]any{"error": http.StatusText(code)})
	}
}

// hang never answers: the request ends when the caller gives up, which
// is counted.
func hang() step {
	return func(p *scriptedProvider, _ http.ResponseWriter, r *http.Request, id string, _ int) {
		select {
		case <-r.Context().Done():
			p.mu.Lock()
			p.cancelled[id]++
			p.mu.Unlock()
		case <-p.closed:
		}
	}
}

// cancellations returns how many of a review's hanging requests the
// caller cancelled.
func (p *scriptedProvider) cancellations(reviewID string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cancelled[reviewID]
}

// async answers 202; unless state is empty, the finding follows by a
// signed callback once the answer is sent.
func async(state string, reasons ...string) step {
	return func(p *scriptedProvider, w http.ResponseWriter, _ *http.Request, id string, attempt int) {
		w.WriteHeader(http.StatusAccepted)
		if state == "" {
			return
		}
		go func() {
			select { // let the 202 reach the caller first
			case <-time.After(20 * time.Millisecond):
			case <-p.closed:
				return
			}
			code, err := p.sendCallback(id, attempt, state, reasons, time.Now(), e2eSecretKey)
			if err != nil {
				code = -1
			}
			p.mu.Lock()
			p.callbacks[id] = append(p.callbacks[id], code)
			p.mu.Unlock()
		}()
	}
}

// callbackFirst sends the signed finding and waits for the server's answer
// before it answers 202: a provider faster than its own HTTP answer.
func callbackFirst(state string) step {
	return func(p *scriptedProvider, w http.ResponseWriter, _ *http.Request, id string, attempt int) {
		code, err := p.sendCallback(id, attempt, state, []string{"called back first"}, time.Now(), e2eSecretKey)
		if err != nil {
			code = -1
		}
		p.mu.Lock()
		p.callbacks[id] = append(p.callbacks[id], code)
		p.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}
}

// cutOff answers 200 at once but sends the finding only after the caller
// gave up on the attempt.
func cutOff() step {
	return func(p *scriptedProvider, w http.ResponseWriter, r *http.Request, id string, _ int) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`{"review_id":`))
		_ = http.NewResponseController(w).Flush()
		select {
		case <-r.Context().Done():
		case <-p.closed:
			return
		}
		_, _ = w.Write([]byte(`"` + id + `","state":"rejected","reasons":["too late"]}`))
	}
}

// resetConnection drops the connection without an answer.
func resetConnection() step {
	return func(_ *scriptedProvider, w http.ResponseWriter, _ *http.Request, _ string, _ int) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}
}

// sendCallback posts a findings callback for the attempt, signed as the
// Standard Webhooks specification says with key at time ts, and returns
// the server's status.
func (p *scriptedProvider) sendCallback(id string, attempt int, state string, reasons []string, ts time.Time, key []byte) (int, error) {
	res, err := p.postCallback(id, attempt, state, reasons, ts, key)
	if err != nil {
		return 0, err
	}
	return res.Status, nil
}

func (p *scriptedProvider) postCallback(id string, attempt int, state string, reasons []string, ts time.Time, key []byte) (response, error) {
	body, _ := json.Marshal(map[string]any{"review_id": id, "attempt": attempt, "state": state, "reasons": append([]string{}, reasons...)})
	return p.postCallbackBody(id, body, ts, key)
}

// msgSeq numbers webhook-id values, unique within a test run.
var msgSeq atomic.Int64

// postCallbackBody posts body, signed, as the findings callback of review id.
func (p *scriptedProvider) postCallbackBody(id string, body []byte, ts time.Time, key []byte) (response, error) {
	p.mu.Lock()
	target := p.target
	p.mu.Unlock()
	req, err := http.NewRequest(http.MethodPost, target+"/v1/reviews/"+id+"/findings", bytes.NewReader(body))
	if err != nil {
		return response{}, err
	}
	msgID := fmt.Sprintf("msg_%s_%d", id, msgSeq.Add(1))
	stamp := strconv.FormatInt(ts.Unix(), 10)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(msgID + "." + stamp + "." + string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("webhook-id", msgID)
	req.Header.Set("webhook-timestamp", stamp)
	req.Header.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	res, err := e2eClient.Do(req)
	if err != nil {
		return response{}, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if res.StatusCode == http.StatusConflict {
		p.conflicts.Add(1)
	}
	return response{Status: res.StatusCode, Header: res.Header, Body: raw}, err
}
