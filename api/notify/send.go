package notify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"

	"github.com/reviewledger/reviewledger/eventstore/clock"
)

// due is a delivery to attempt.
type due struct {
	id         string
	body       []byte
	attempts   int
	retrySince time.Time
}

// eligible is the condition of a delivery the sender may attempt: pending,
// not in flight ($1), and no earlier delivery of its review undelivered.
const eligible = `d.state = 'pending' AND NOT (d.id = ANY($1))
	AND NOT EXISTS (SELECT 1 FROM notify_delivery e
		WHERE e.review_id = d.review_id AND e.revision < d.revision AND e.state <> 'delivered')`

// send attempts the due deliveries, at most Concurrency at once, until ctx
// is done (nil, once the attempts in flight have ended) or a query fails.
// It looks for due work when an attempt ends, when follow kicks, when the
// next scheduled attempt is due, and every PollInterval (a redelivery asked
// through another process).
func (n *Notifier) send(ctx context.Context, kick <-chan struct{}) error {
	inFlight := map[string]bool{}
	ended := make(chan string, n.cfg.Concurrency)
	defer func() {
		for range len(inFlight) {
			<-ended
		}
		n.metrics.inFlight.Set(0)
	}()
	for ctx.Err() == nil {
		wait := n.cfg.PollInterval
		if free := n.cfg.Concurrency - len(inFlight); free > 0 {
			now := n.cfg.Now()
			ds, next, err := n.due(ctx, now, free, inFlight)
			if err != nil {
				return err
			}
			for _, d := range ds {
				inFlight[d.id] = true
				go func() {
					n.attempt(ctx, d)
					ended <- d.id
				}()
			}
			if len(ds) == free {
				wait = 0 // there may be more
			} else if !next.IsZero() {
				wait = min(wait, max(0, next.Sub(now)))
			}
			n.metrics.inFlight.Set(float64(len(inFlight)))
		}
		if wait == 0 && len(inFlight) < n.cfg.Concurrency {
			continue
		}
		t := time.NewTimer(wait)
		select {
		case id := <-ended:
			delete(inFlight, id)
		case <-kick:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	return nil
}

// due returns up to limit deliveries to attempt now, the earliest
// scheduled first, and when the next one not due yet is (zero for none).
func (n *Notifier) due(ctx context.Context, now time.Time, limit int, inFlight map[string]bool) ([]due, time.Time, error) {
	busy := make([]string, 0, len(inFlight))
	for id := range inFlight {
		busy = append(busy, id)
	}
	rows, err := n.cfg.Pool.Query(ctx, `SELECT d.id, d.body, d.attempts, d.retry_since FROM notify_delivery d
		WHERE `+eligible+` AND d.next_attempt_at <= $2
		ORDER BY d.next_attempt_at, d.created_at LIMIT $3`, busy, now, limit)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("notify: due deliveries: %w", err)
	}
	defer rows.Close()
	var ds []due
	for rows.Next() {
		var d due
		var body string
		if err := rows.Scan(&d.id, &body, &d.attempts, &d.retrySince); err != nil {
			return nil, time.Time{}, fmt.Errorf("notify: due deliveries: %w", err)
		}
		d.body = []byte(body)
		ds = append(ds, d)
	}
	if err := rows.Err(); err != nil {
		return nil, time.Time{}, fmt.Errorf("notify: due deliveries: %w", err)
	}
	if len(ds) == limit {
		return ds, time.Time{}, nil
	}
	var next *time.Time
	if err := n.cfg.Pool.QueryRow(ctx, `SELECT min(d.next_attempt_at) FROM notify_delivery d WHERE `+eligible+` AND d.next_attempt_at > $2`,
		busy, now).Scan(&next); err != nil {
		return nil, time.Time{}, fmt.Errorf("notify: next scheduled delivery: %w", err)
	}
	if next == nil {
		return ds, time.Time{}, nil
	}
	return ds, *next, nil
}

// result is how one attempt went.
type result struct {
	status     int // 0 without an answer
	err        string
	retryAfter time.Duration
}

func (r result) ok() bool { return r.status >= 200 && r.status < 300 }

// attempt posts one delivery, signed at the time of the attempt, and
// records how it went. An attempt cut short without an answer because ctx
// ended (the notifier stopping) is not recorded: the delivery stays due
// for the next owner. One answered is recorded even then.
func (n *Notifier) attempt(ctx context.Context, d due) {
	start := time.Now()
	r := n.post(ctx, d)
	n.metrics.duration.Observe(time.Since(start).Seconds())
	if ctx.Err() != nil && r.status == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	if err := n.record(rctx, d, r); err != nil {
		// The row stays as it was: the delivery is attempted again.
		n.log.Warn("notify: recording an attempt failed; it will be made again", "delivery", d.id, "error", err)
	}
}

// recordTimeout bounds the write of an attempt's outcome.
const recordTimeout = 5 * time.Second

// maxAnswerBytes is how much of an answer is read (and then dropped), so
// that the connection can be used again.
const maxAnswerBytes = 64 << 10

func (n *Notifier) post(ctx context.Context, d due) result {
	actx, cancel := context.WithTimeout(ctx, n.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, n.cfg.URL, bytes.NewReader(d.body))
	if err != nil {
		return result{err: "request: " + err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "reviewledger-webhooks")
	n.signer.SignHeader(req.Header, d.id, n.cfg.Now(), d.body)
	res, err := n.cfg.Client.Do(req)
	if err != nil {
		if errors.Is(actx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
			return result{err: fmt.Sprintf("no answer within %s", n.cfg.Timeout)}
		}
		return result{err: transportError(err)}
	}
	defer res.Body.Close()
	head, _ := io.ReadAll(io.LimitReader(res.Body, 256))
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, maxAnswerBytes))
	r := result{status: res.StatusCode}
	if !r.ok() {
		r.err = fmt.Sprintf("HTTP %d", res.StatusCode)
		if text := printable(head, 200); text != "" {
			r.err += ": " + text
		}
		r.retryAfter = retryAfter(res.Header, n.cfg.Now())
	}
	return r
}

// transportError describes a failed request without its URL, which may
// hold credentials.
func transportError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return printable([]byte(err.Error()), 200)
}

// printable returns at most n characters of b, control characters and
// invalid UTF-8 replaced, for the last_error of an admin listing.
func printable(b []byte, n int) string {
	s := strings.ToValidUTF8(string(b), "?")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	s = strings.TrimSpace(s)
	if r := []rune(s); len(r) > n {
		s = string(r[:n]) + "…"
	}
	return s
}

// record writes how an attempt went: delivered, retried at its next
// attempt, or given up at the end of its retry window.
func (n *Notifier) record(ctx context.Context, d due, r result) error {
	now := n.cfg.Now()
	var status *int
	if r.status != 0 {
		status = &r.status
	}
	if r.ok() {
		n.metrics.attempts.WithLabelValues(outcomeDelivered).Inc()
		_, err := n.cfg.Pool.Exec(ctx, `UPDATE notify_delivery SET state = 'delivered', attempts = attempts + 1,
			last_attempt_at = $2, last_status = $3, last_error = NULL, delivered_at = $2
			WHERE id = $1 AND state = 'pending'`, d.id, now, status)
		return err
	}
	wait := clock.Backoff(n.cfg.BackoffInitial, n.cfg.BackoffMax, d.attempts+1, n.cfg.Rand(), r.retryAfter)
	next, retry := nextAttempt(now, d.retrySince, n.cfg.RetryFor, wait)
	if !retry {
		n.metrics.attempts.WithLabelValues(outcomeGivenUp).Inc()
		n.log.Warn("notify: delivery given up at the end of its retry window", "delivery", d.id,
			"attempts", d.attempts+1, "retry_for", n.cfg.RetryFor, "error", r.err)
		_, err := n.cfg.Pool.Exec(ctx, `UPDATE notify_delivery SET state = 'failed', attempts = attempts + 1,
			last_attempt_at = $2, last_status = $3, last_error = $4 WHERE id = $1 AND state = 'pending'`, d.id, now, status, r.err)
		return err
	}
	n.metrics.attempts.WithLabelValues(outcomeRetry).Inc()
	_, err := n.cfg.Pool.Exec(ctx, `UPDATE notify_delivery SET attempts = attempts + 1, next_attempt_at = $5,
		last_attempt_at = $2, last_status = $3, last_error = $4 WHERE id = $1 AND state = 'pending'`, d.id, now, status, r.err, next)
	return err
}

// redactedURL is the URL without credentials, for logs.
func redactedURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(invalid URL)"
	}
	return u.Redacted()
}
