package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/reviewledger/reviewledger/eventstore/clock"
)

// State is where a review stands.
type State string

const (
	StatePending      State = "pending"
	StateAccepted     State = "accepted"
	StateRejected     State = "rejected"
	StateManualReview State = "manual_review"
)

// Final reports whether the review is decided for good.
func (s State) Final() bool { return s == StateAccepted || s == StateRejected }

// Review is the review view of the API, GET /v1/reviews/{id}, and the
// data of a decision webhook.
type Review struct {
	ReviewID     string     `json:"review_id"`
	State        State      `json:"state"`
	ContentClass string     `json:"content_class"`
	Attempts     int        `json:"attempts"`
	Version      uint64     `json:"version"`
	SubmittedAt  time.Time  `json:"submitted_at"`
	Deadline     time.Time  `json:"deadline"`
	DecidedAt    *time.Time `json:"decided_at"`
	Reasons      []string   `json:"reasons"`
	// DecidedByProvider names the provider whose finding decided the
	// review; "" while pending and when a moderator or the policy decided.
	DecidedByProvider string `json:"decided_by_provider,omitempty"`
}

// Submission is a review to submit.
type Submission struct {
	// ReviewID is chosen by the platform: 1 to 128 characters of
	// A-Z a-z 0-9 . _ : -. Submitting the same ID with the same class and
	// content again returns the same review.
	ReviewID     string `json:"review_id"`
	ContentClass string `json:"content_class"`
	ContentType  string `json:"content_type"`
	Content      string `json:"content"`
}

// Submit submits a review and returns it, with created true when this
// call's answer created it (202) and false when the review existed (200).
// A transient failure (no answer, 429, 502, 503, 504) is retried with the
// same body, so a review created by a try whose answer was lost comes back
// as existing. Errors: an *Error matching ErrInvalid, ErrConflict (same ID,
// other content or class), ErrUnauthorized, ErrUnavailable.
func (c *Client) Submit(ctx context.Context, s Submission) (r Review, created bool, err error) {
	body, err := json.Marshal(s)
	if err != nil {
		return Review{}, false, fmt.Errorf("client: encode the submission: %w", err)
	}
	status, err := c.do(ctx, http.MethodPost, "/v1/reviews", body, 0, c.cfg.Retries, &r)
	if err != nil {
		return Review{}, false, fmt.Errorf("submit %s: %w", s.ReviewID, err)
	}
	return r, status == http.StatusAccepted, nil
}

// SubmitAndWait submits a review and returns it once it is no longer
// pending, as Submit and then Wait would, in one round trip when the
// outcome comes within WaitStep: the submit itself waits
// (POST /v1/reviews?wait=). created is as Submit's; failures are retried
// as Submit retries them, and a wait that ends first goes on as Wait.
func (c *Client) SubmitAndWait(ctx context.Context, s Submission) (r Review, created bool, err error) {
	body, err := json.Marshal(s)
	if err != nil {
		return Review{}, false, fmt.Errorf("client: encode the submission: %w", err)
	}
	status, err := c.do(ctx, http.MethodPost, "/v1/reviews?wait="+c.waitStep(), body, c.cfg.WaitStep, c.cfg.Retries, &r)
	if err != nil {
		return Review{}, false, fmt.Errorf("submit %s: %w", s.ReviewID, err)
	}
	created = status == http.StatusAccepted
	if r.State == StatePending {
		r, err = c.Wait(ctx, s.ReviewID)
	}
	return r, created, err
}

// waitStep is WaitStep as a wait query.
func (c *Client) waitStep() string { return strconv.Itoa(int(c.cfg.WaitStep/time.Second)) + "s" }

// Get reads a review from the ledger (the server's own writes included).
// Errors: an *Error matching ErrNotFound, ErrUnauthorized, ErrUnavailable.
func (c *Client) Get(ctx context.Context, id string) (Review, error) {
	var r Review
	if _, err := c.do(ctx, http.MethodGet, "/v1/reviews/"+url.PathEscape(id), nil, 0, c.cfg.Retries, &r); err != nil {
		return Review{}, fmt.Errorf("get %s: %w", id, err)
	}
	return r, nil
}

// Wait returns the review once it is no longer pending: accepted,
// rejected, or manual_review (a moderator decides it later; the webhook
// tells when). It long-polls, asking again each WaitStep, and rides out
// transient failures, until ctx ends: then it returns ctx's error.
// Errors: an *Error matching ErrNotFound or ErrUnauthorized.
func (c *Client) Wait(ctx context.Context, id string) (Review, error) {
	path := "/v1/reviews/" + url.PathEscape(id) + "?wait=" + c.waitStep()
	for try := 1; ; try++ {
		var r Review
		_, err := c.do(ctx, http.MethodGet, path, nil, c.cfg.WaitStep, 0, &r)
		switch {
		case err == nil && r.State != StatePending:
			return r, nil
		case err == nil:
			try = 0 // the wait ended: ask again at once
			continue
		case ctx.Err() != nil:
			return Review{}, fmt.Errorf("wait for %s: %w", id, ctx.Err())
		case !errors.Is(err, ErrUnavailable):
			return Review{}, fmt.Errorf("wait for %s: %w", id, err)
		}
		var retryAfter time.Duration
		var te *transientError
		if errors.As(err, &te) {
			retryAfter = te.retryAfter
		}
		if err := clock.Sleep(ctx, c.backoff(try, retryAfter)); err != nil {
			return Review{}, fmt.Errorf("wait for %s: %w", id, err)
		}
	}
}

// transientError is a try that failed transiently, with the server's
// Retry-After.
type transientError struct {
	err        error
	retryAfter time.Duration
}

func (e *transientError) Error() string { return e.err.Error() }
func (e *transientError) Unwrap() error { return e.err }

// Is makes every transient failure match ErrUnavailable.
func (e *transientError) Is(target error) bool { return target == ErrUnavailable }

// maxRetryAfter bounds the Retry-After honoured.
const maxRetryAfter = 30 * time.Second

// do makes the request, and again up to retries times after a transient
// failure, and decodes a success into out. wait, when set, is the
// server-side wait the request asks for: its answer is awaited that much
// longer.
func (c *Client) do(ctx context.Context, method, path string, body []byte, wait time.Duration, retries int, out any) (int, error) {
	for try := 1; ; try++ {
		status, err := c.once(ctx, method, path, body, wait, out)
		var te *transientError
		if err == nil || !errors.As(err, &te) || try > retries || ctx.Err() != nil {
			return status, err
		}
		if err := clock.Sleep(ctx, c.backoff(try, te.retryAfter)); err != nil {
			return 0, err
		}
	}
}

func (c *Client) once(ctx context.Context, method, path string, body []byte, wait time.Duration, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	tctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout+wait)
	defer cancel()
	req, err := http.NewRequestWithContext(tctx, method, c.base+path, rd)
	if err != nil {
		return 0, fmt.Errorf("client: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, &transientError{err: err}
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, 4<<20))
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, &transientError{err: fmt.Errorf("read the answer: %w", err)}
	}
	if res.StatusCode >= 200 && res.StatusCode < 300 {
		if err := json.Unmarshal(raw, out); err != nil {
			return res.StatusCode, fmt.Errorf("client: decode the answer: %w", err)
		}
		return res.StatusCode, nil
	}
	e := &Error{Status: res.StatusCode}
	_ = json.Unmarshal(raw, e) // a problem body; without one, the status says it
	e.Status = res.StatusCode
	if transientStatus(res.StatusCode) {
		return res.StatusCode, &transientError{err: e, retryAfter: retryAfter(res.Header)}
	}
	return res.StatusCode, e
}

// retryAfter reads a Retry-After of seconds or an HTTP date.
func retryAfter(h http.Header) time.Duration {
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	var d time.Duration
	if n, err := strconv.Atoi(v); err == nil {
		d = time.Duration(n) * time.Second
	} else if at, err := http.ParseTime(v); err == nil {
		d = time.Until(at)
	}
	return min(max(d, 0), maxRetryAfter)
}
