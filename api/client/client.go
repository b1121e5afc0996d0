// Package client is the Go client of reviewledger's HTTP API for the
// platform that submits content for review: Submit a review (safe to
// repeat: the review ID is the idempotency key, and transient failures are
// retried with it), Get it, Wait for it to leave pending through the
// long-poll (GET /v1/reviews/{id}?wait=), or SubmitAndWait to have the
// submit itself wait for the outcome, and receive the decision
// webhooks with a Receiver, which verifies their Standard Webhooks
// signatures and drops redeliveries by webhook-id.
//
// The package uses only the standard library.
package client

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/reviewledger/reviewledger/eventstore/clock"
)

// ErrInvalidConfig is wrapped by the errors of New and NewReceiver; the
// message names the field.
var ErrInvalidConfig = errors.New("invalid client configuration")

// Config configures a Client.
type Config struct {
	// BaseURL is reviewledger's address, such as http://reviewledger:8080.
	BaseURL string
	// Token is a bearer token of the submitter role (or admin).
	Token string
	// HTTPClient sends the requests; a client of its own when nil. Its
	// Timeout, if any, must exceed WaitStep, or Wait's requests are cut.
	HTTPClient *http.Client
	// Retries is how many times a request failing transiently (no
	// answer, 429, 502, 503, 504) is made again; 0 is the default, 5;
	// negative is none.
	Retries int
	// BackoffInitial and BackoffMax shape the wait between tries: it
	// doubles from BackoffInitial (default 200ms) up to BackoffMax
	// (default 5s), with jitter, and is never shorter than the server's
	// Retry-After.
	BackoffInitial time.Duration
	BackoffMax     time.Duration
	// WaitStep is the wait each of Wait's and SubmitAndWait's requests
	// asks for (default 60s, the server's largest).
	WaitStep time.Duration
	// Timeout bounds each try, beyond the wait it asks for (default 30s);
	// a try without an answer by then is a transient failure.
	Timeout time.Duration
}

// MaxWaitStep is the longest wait the server grants one request.
const MaxWaitStep = 60 * time.Second

func (c *Config) setDefaults() {
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{}
	}
	if c.Retries == 0 {
		c.Retries = 5
	}
	if c.BackoffInitial == 0 {
		c.BackoffInitial = 200 * time.Millisecond
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = 5 * time.Second
	}
	if c.WaitStep == 0 {
		c.WaitStep = MaxWaitStep
	}
	if c.Timeout == 0 {
		c.Timeout = 30 * time.Second
	}
}

// Validate names the first field at fault.
func (c *Config) Validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("client: %s: %s: %w", field, fmt.Sprintf(format, args...), ErrInvalidConfig)
	}
	u, err := url.Parse(c.BaseURL)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return bad("BaseURL", "must be an http or https URL, got %q", c.BaseURL)
	case c.Token == "":
		return bad("Token", "required")
	case c.BackoffInitial < 0 || c.BackoffMax < c.BackoffInitial:
		return bad("BackoffMax", "must be at least BackoffInitial (%s), got %s", c.BackoffInitial, c.BackoffMax)
	case c.WaitStep < time.Second || c.WaitStep > MaxWaitStep:
		return bad("WaitStep", "must be between 1s and %s, got %s", MaxWaitStep, c.WaitStep)
	case c.Timeout < 0:
		return bad("Timeout", "must not be negative, got %s", c.Timeout)
	case c.HTTPClient.Timeout > 0 && c.HTTPClient.Timeout <= c.WaitStep:
		return bad("HTTPClient.Timeout", "%s cuts Wait's requests of %s", c.HTTPClient.Timeout, c.WaitStep)
	}
	return nil
}

// Client calls reviewledger. It is safe for concurrent use.
type Client struct {
	cfg  Config
	base string
}

// New returns a client; the error names the field at fault.
func New(cfg Config) (*Client, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Client{cfg: cfg, base: strings.TrimRight(cfg.BaseURL, "/")}, nil
}

// backoff is the wait before try n+1 (n from 1): clock.Backoff from
// BackoffInitial to BackoffMax, with a random jitter, at least retryAfter.
func (c *Client) backoff(n int, retryAfter time.Duration) time.Duration {
	return clock.Backoff(c.cfg.BackoffInitial, c.cfg.BackoffMax, n, rand.Float64(), retryAfter)
}
