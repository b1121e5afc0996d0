package provider

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/reviewledger/reviewledger/domain"
)

func TestHTTPRequestShape(t *testing.T) {
	t.Parallel()
	var got struct {
		header http.Header
		body   map[string]any
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.header = r.Header.Clone()
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &got.body)
		_, _ = w.Write([]byte(`{"review_id":"rev-1","state":"accepted","reasons":["fine"]}`))
	}))
	defer srv.Close()
	p, err := NewHTTP(HTTPConfig{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	res := p.Call(context.Background(), Request{ReviewID: "rev-1", Attempt: 2, ContentClass: "caption_suggestion", ContentType: "text/plain", Content: []byte("hello")})
	if res.Outcome != OutcomeFinding || res.Finding.State != domain.DecisionAccepted || res.Finding.Attempt != 2 || res.Finding.ReviewID != "rev-1" {
		t.Fatalf("result = %+v", res)
	}
	if k := got.header.Get("Idempotency-Key"); k != "rev-1" {
		t.Errorf("Idempotency-Key = %q", k)
	}
	if a := got.header.Get("X-Review-Attempt"); a != "2" {
		t.Errorf("X-Review-Attempt = %q", a)
	}
	want := map[string]any{"review_id": "rev-1", "attempt": float64(2), "content_class": "caption_suggestion", "content_type": "text/plain", "content": "hello"}
	if len(got.body) != len(want) {
		t.Errorf("body fields = %v, want exactly %v", got.body, want)
	}
	for k, v := range want {
		if got.body[k] != v {
			t.Errorf("body %s = %v, want %v", k, got.body[k], v)
		}
	}
}

// Content that is not valid UTF-8 (submitted base64) reaches the provider
// byte for byte, base64-encoded and marked so; text goes as it is.
func TestHTTPSendsBinaryContentUnaltered(t *testing.T) {
	t.Parallel()
	bodies := make(chan map[string]any, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &body)
		bodies <- body
		_, _ = w.Write([]byte(`{"review_id":"rev-1","state":"accepted","reasons":[]}`))
	}))
	defer srv.Close()
	p, err := NewHTTP(HTTPConfig{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	binary := []byte{0xff, 0x00, 0xfe, 'a', 0x80}
	for _, c := range []struct {
		content                   []byte
		wantContent, wantEncoding any
	}{
		{binary, base64.StdEncoding.EncodeToString(binary), "base64"},
		{[]byte("héllo <b>"), "héllo <b>", nil},
	} {
		res := p.Call(context.Background(), Request{ReviewID: "rev-1", Attempt: 1, ContentClass: "c", ContentType: "application/octet-stream", Content: c.content})
		if res.Outcome != OutcomeFinding {
			t.Fatalf("result = %+v", res)
		}
		body := <-bodies
		if body["content"] != c.wantContent || body["content_encoding"] != c.wantEncoding {
			t.Errorf("content %q: sent content %v, content_encoding %v; want %v, %v", c.content, body["content"], body["content_encoding"], c.wantContent, c.wantEncoding)
		}
		if c.wantEncoding != nil {
			got, err := base64.StdEncoding.DecodeString(body["content"].(string))
			if err != nil || !bytes.Equal(got, c.content) {
				t.Errorf("decoded content = %x (%v), want %x", got, err, c.content)
			}
		}
	}
}

// The attempt's trace context goes to the provider as a W3C traceparent;
// an untraced call sends none.
func TestHTTPSendsTraceparent(t *testing.T) {
	t.Parallel()
	got := make(chan string, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("traceparent")
		_, _ = w.Write([]byte(`{"review_id":"rev-1","state":"accepted","reasons":[]}`))
	}))
	defer srv.Close()
	p, err := NewHTTP(HTTPConfig{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": parent})
	p.Call(ctx, Request{ReviewID: "rev-1", Attempt: 1, ContentClass: "c", ContentType: "text/plain", Content: []byte("x")})
	if h := <-got; h != parent {
		t.Errorf("traceparent %q, want %q", h, parent)
	}
	p.Call(context.Background(), Request{ReviewID: "rev-1", Attempt: 1, ContentClass: "c", ContentType: "text/plain", Content: []byte("x")})
	if h := <-got; h != "" {
		t.Errorf("untraced call sent traceparent %q", h)
	}
}

func TestHTTPAnswers(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name       string
		status     int
		header     map[string]string
		body       string
		outcome    Outcome
		class      domain.Classification
		retryable  bool
		retryAfter time.Duration
		state      domain.Decision
		reviewID   string
	}{
		{name: "200 finding", status: 200, body: `{"review_id":"r","state":"rejected","reasons":["x"]}`, outcome: OutcomeFinding, state: domain.DecisionRejected, reviewID: "r"},
		{name: "200 mismatched id is passed on for the engine to refuse", status: 200, body: `{"review_id":"other","state":"accepted"}`, outcome: OutcomeFinding, state: domain.DecisionAccepted, reviewID: "other"},
		{name: "200 not JSON", status: 200, body: `ok`, outcome: OutcomeFailure, class: domain.ClassInvalidFinding, retryable: true},
		{name: "202", status: 202, outcome: OutcomeAccepted},
		{name: "429 with seconds", status: 429, header: map[string]string{"Retry-After": "3"}, outcome: OutcomeFailure, class: domain.ClassRateLimited, retryable: true, retryAfter: 3 * time.Second},
		{name: "429 with a date", status: 429, header: map[string]string{"Retry-After": now.Add(7 * time.Second).Format(http.TimeFormat)}, outcome: OutcomeFailure, class: domain.ClassRateLimited, retryable: true, retryAfter: 7 * time.Second},
		{name: "429 with garbage", status: 429, header: map[string]string{"Retry-After": "later"}, outcome: OutcomeFailure, class: domain.ClassRateLimited, retryable: true},
		{name: "503", status: 503, header: map[string]string{"Retry-After": "1"}, outcome: OutcomeFailure, class: domain.ClassProviderUnavailable, retryable: true, retryAfter: time.Second},
		{name: "400", status: 400, outcome: OutcomeFailure, class: domain.ClassProviderRefused},
		{name: "404", status: 404, outcome: OutcomeFailure, class: domain.ClassProviderRefused},
		{name: "500", status: 500, outcome: OutcomeFailure, class: domain.ClassProviderUnavailable, retryable: true},
		{name: "204", status: 204, outcome: OutcomeFailure, class: domain.ClassInvalidFinding, retryable: true},
		{name: "302 not followed", status: 302, header: map[string]string{"Location": "/elsewhere"}, outcome: OutcomeFailure, class: domain.ClassInvalidFinding, retryable: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for k, v := range c.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(c.status)
				_, _ = w.Write([]byte(c.body))
			}))
			defer srv.Close()
			p, err := NewHTTP(HTTPConfig{URL: srv.URL, Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			res := p.Call(context.Background(), Request{ReviewID: "r", Attempt: 1})
			if res.Outcome != c.outcome || res.Classification != c.class || res.Retryable() != c.retryable || res.RetryAfter != c.retryAfter {
				t.Fatalf("result = %+v (retryable %v), want outcome %v class %q retryable %v retry-after %s", res, res.Retryable(), c.outcome, c.class, c.retryable, c.retryAfter)
			}
			if c.outcome == OutcomeFinding && (res.Finding.State != c.state || res.Finding.ReviewID != c.reviewID) {
				t.Fatalf("finding = %+v", res.Finding)
			}
		})
	}
}

func TestHTTPCancelledAtTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	p, _ := NewHTTP(HTTPConfig{URL: srv.URL})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan Result)
	go func() { done <- p.Call(ctx, Request{ReviewID: "r", Attempt: 1}) }()
	cancel()
	res := <-done
	if res.Outcome != OutcomeFailure || res.Classification != domain.ClassDeadlineExceeded {
		t.Fatalf("result = %+v, want deadline_exceeded", res)
	}
}

// A call cut off before its request was sent says so (Unsent): the
// provider cannot have seen it. One cut off after, waiting for the answer,
// does not.
func TestHTTPCancelledBeforeItWasSent(t *testing.T) {
	t.Parallel()
	release := make(chan struct{}) // ends the dial and the handler below, whose contexts outlive the calls
	dialling := make(chan struct{}, 1)
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
		dialling <- struct{}{}
		select { // a connection that is never made
		case <-ctx.Done():
		case <-release:
		}
		return nil, errors.New("no connection")
	}
	arrived := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)

	unsent, _ := NewHTTP(HTTPConfig{URL: "http://provider.invalid", Client: &http.Client{Transport: transport}})
	sent, _ := NewHTTP(HTTPConfig{URL: srv.URL})
	for _, c := range []struct {
		name    string
		p       *HTTP
		started chan struct{}
		unsent  bool
	}{{"cut off while connecting", unsent, dialling, true}, {"cut off waiting for the answer", sent, arrived, false}} {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan Result)
		go func() { done <- c.p.Call(ctx, Request{ReviewID: "r", Attempt: 1}) }()
		<-c.started
		cancel()
		if res := <-done; res.Classification != domain.ClassDeadlineExceeded || res.Unsent != c.unsent {
			t.Errorf("%s: result = %+v, want deadline_exceeded, unsent %v", c.name, res, c.unsent)
		}
	}
}

func TestHTTPConnectionError(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	p, _ := NewHTTP(HTTPConfig{URL: "http://" + addr})
	res := p.Call(context.Background(), Request{ReviewID: "r", Attempt: 1})
	if res.Classification != domain.ClassTransportError || !res.Retryable() {
		t.Fatalf("result = %+v, want retryable transport_error", res)
	}
}

func TestNewHTTPRefusesBadURL(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"", "ftp://x", "/relative", "http://"} {
		if _, err := NewHTTP(HTTPConfig{URL: u}); err == nil {
			t.Errorf("NewHTTP(%q) accepted", u)
		}
	}
}
