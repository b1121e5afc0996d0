package provider

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"
	"unicode/utf8"

	fastjson "github.com/go-json-experiment/json/v1"
	"go.opentelemetry.io/otel/propagation"

	"github.com/reviewledger/reviewledger/domain"
)

// maxAnswerBytes bounds how much of a provider's answer is read.
const maxAnswerBytes = 1 << 20

// HTTP is the provider protocol of docs/contracts.md, section 4: one POST per attempt, with
// Idempotency-Key set to the review ID on every attempt and X-Review-Attempt
// to the attempt number. The request is cancelled when ctx is done, which
// the engine arranges at the attempt's timeout.
type HTTP struct {
	url    string
	client *http.Client
	now    func() time.Time
}

// HTTPConfig configures the http provider.
type HTTPConfig struct {
	// URL is the provider's endpoint (REVIEWLEDGER_PROVIDER_URL).
	URL string
	// Client sends the requests; when nil, a client without redirects
	// keeping up to MaxConns connections to the provider open.
	Client *http.Client
	// MaxConns is how many idle connections to the provider are kept for
	// reuse (the engine's concurrent calls, REVIEWLEDGER_WORKERS). Default
	// 256.
	MaxConns int
	// Now reads the clock for Retry-After dates; time.Now when nil.
	Now func() time.Time
}

// ErrInvalidURL is returned by NewHTTP for a missing or malformed URL.
var ErrInvalidURL = errors.New("invalid provider url")

// NewHTTP returns the http provider.
func NewHTTP(cfg HTTPConfig) (*HTTP, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("REVIEWLEDGER_PROVIDER_URL %q must be an absolute http or https URL: %w", cfg.URL, ErrInvalidURL)
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 256
	}
	if cfg.Client == nil {
		transport := http.DefaultTransport.(*http.Transport).Clone()
		// Every call goes to one host: keep as many connections open to
		// it as calls are made at once, rather than dialling anew.
		transport.MaxIdleConns, transport.MaxIdleConnsPerHost = cfg.MaxConns, cfg.MaxConns
		cfg.Client = &http.Client{
			Transport: transport,
			// A redirect is not in the protocol: it is answered like any
			// other unexpected status, never followed.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &HTTP{url: cfg.URL, client: cfg.Client, now: cfg.Now}, nil
}

type httpRequestBody struct {
	ReviewID     string `json:"review_id"`
	Attempt      int    `json:"attempt"`
	ContentClass string `json:"content_class"`
	ContentType  string `json:"content_type"`
	Content      string `json:"content"`
	// ContentEncoding is "base64" when Content is the base64 of bytes
	// that are not valid UTF-8 (submitted with content_encoding base64),
	// which a JSON string cannot carry unaltered; absent otherwise, so
	// text reaches the provider as it always did.
	ContentEncoding string `json:"content_encoding,omitempty"`
}

// contentField is how content travels in the request body: as the string
// itself when it is valid UTF-8, otherwise base64-encoded.
func contentField(b []byte) (content, encoding string) {
	if utf8.Valid(b) {
		return string(b), ""
	}
	return base64.StdEncoding.EncodeToString(b), "base64"
}

type httpFinding struct {
	ReviewID string   `json:"review_id"`
	State    string   `json:"state"`
	Reasons  []string `json:"reasons"`
}

// Call makes one attempt. Each answer is handled as the provider protocol's
// table says (docs/contracts.md, section 4); the result never carries
// content.
func (p *HTTP) Call(ctx context.Context, req Request) Result {
	content, encoding := contentField(req.Content)
	body, err := json.Marshal(httpRequestBody{
		ReviewID: req.ReviewID, Attempt: req.Attempt, ContentClass: req.ContentClass,
		ContentType: req.ContentType, Content: content, ContentEncoding: encoding,
	})
	if err != nil {
		return Failure(domain.ClassTransportError, "encode request")
	}
	// Whether any of the request may have reached the provider: from the
	// moment its headers are written they may be on the wire, whatever
	// becomes of the body (HTTP/2 sends them ahead of it); a call cut off
	// before then never reached it (Result.Unsent).
	var started atomic.Bool
	traced := httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteHeaders: func() { started.Store(true) }})
	hr, err := http.NewRequestWithContext(traced, http.MethodPost, p.url, bytes.NewReader(body))
	if err != nil {
		return Failure(domain.ClassTransportError, "build request")
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Idempotency-Key", req.ReviewID)
	hr.Header.Set("X-Review-Attempt", strconv.Itoa(req.Attempt))
	// The attempt's span, so that the provider's spans join the review's
	// trace (W3C trace context; nothing when the call is not traced).
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(hr.Header))
	// One attempt is one request. net/http resends a request carrying an
	// Idempotency-Key on a connection that dies before an answer when it
	// can rewind the body; without GetBody it cannot, so the attempt fails
	// as a transport error and the control path decides about a retry.
	hr.GetBody = nil
	resp, err := p.client.Do(hr)
	if err != nil {
		if ctx.Err() != nil {
			if !started.Load() {
				r := Failure(domain.ClassDeadlineExceeded, "request cancelled before it was sent")
				r.Unsent = true
				return r
			}
			return Failure(domain.ClassDeadlineExceeded, "request cancelled")
		}
		return Failure(domain.ClassTransportError, "connection error")
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		if ctx.Err() != nil {
			return Failure(domain.ClassDeadlineExceeded, "answer cut off at the timeout")
		}
		return Failure(domain.ClassTransportError, "reading answer")
	}
	detail := "http " + strconv.Itoa(resp.StatusCode)
	switch code := resp.StatusCode; {
	case code == http.StatusOK:
		var f httpFinding
		// encoding/json's semantics on a quicker decoder (docs/architecture.md).
		if err := fastjson.Unmarshal(answer, &f); err != nil {
			return Failure(domain.ClassInvalidFinding, "http 200, body is not a finding")
		}
		return Result{Outcome: OutcomeFinding, Detail: detail, Finding: domain.Finding{
			ReviewID: f.ReviewID, Attempt: req.Attempt, State: domain.Decision(f.State), Reasons: f.Reasons,
		}}
	case code == http.StatusAccepted:
		return Result{Outcome: OutcomeAccepted, Detail: detail}
	case code == http.StatusTooManyRequests:
		r := Failure(domain.ClassRateLimited, detail)
		r.RetryAfter = retryAfter(resp.Header.Get("Retry-After"), p.now())
		return r
	case code == http.StatusServiceUnavailable:
		r := Failure(domain.ClassProviderUnavailable, detail)
		r.RetryAfter = retryAfter(resp.Header.Get("Retry-After"), p.now())
		return r
	case code >= 400 && code < 500:
		return Failure(domain.ClassProviderRefused, detail)
	case code >= 500:
		return Failure(domain.ClassProviderUnavailable, detail)
	default:
		// 1xx, 3xx and 2xx other than 200 and 202 carry no finding.
		return Failure(domain.ClassInvalidFinding, detail)
	}
}

// retryAfter parses a Retry-After value, delay-seconds or an HTTP-date,
// relative to now. Anything unparsable or in the past is zero.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		// Far beyond any budget; capped so the multiplication cannot overflow.
		return time.Duration(min(secs, 1<<31)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
