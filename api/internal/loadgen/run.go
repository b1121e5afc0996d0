package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/clock"
	"github.com/reviewledger/reviewledger/projections"
)

// pollInterval is how often the drain waits look again.
const pollInterval = 50 * time.Millisecond

// Run runs the load described by cfg and returns its figures. A Result
// with what was measured so far comes back with an error, too, when the
// run fails part-way.
func Run(ctx context.Context, cfg Config) (res *Result, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	dbURL, drop, err := database(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, drop()) }()
	svc, err := start(ctx, cfg, dbURL)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, svc.stop()) }()

	mem := sampleMemory()
	defer mem.stop()
	res = &Result{Config: cfg, PoolConns: svc.pool.Config().MaxConns, CPUs: runtime.NumCPU(), GoVersion: runtime.Version()}
	defer func() { res.Memory = mem.stop() }()

	client := &http.Client{
		Transport: &http.Transport{Proxy: nil, MaxIdleConns: cfg.Concurrency, MaxIdleConnsPerHost: cfg.Concurrency, IdleConnTimeout: time.Minute},
		Timeout:   30 * time.Second,
	}
	defer client.CloseIdleConnections()
	run := randomHex(4)
	content := func(i int) string {
		return fmt.Sprintf("load %s caption %d: the quick brown fox jumps over the lazy dog, then files its review", run, i)
	}

	// Baseline 1: the same server answering GET /healthz.
	res.Healthz = drive(ctx, "GET /healthz", cfg.Reviews, cfg.Concurrency, cfg.PhaseTimeout, func(ctx context.Context, _ int) (time.Duration, error) {
		return timed(func() error {
			return call(ctx, client, http.MethodGet, svc.baseURL+"/healthz", "", nil, http.StatusOK, nil)
		})
	})
	// Baseline 2: a plain single-row INSERT through the same pool.
	if res.Insert, err = insertBaseline(ctx, svc.pool, cfg, content); err != nil {
		return res, err
	}

	// The load: N submissions over HTTP. A 429 (admission control) is
	// made again after its Retry-After; the latency recorded is that of
	// the request that was accepted.
	prefix := "load-" + run + "-"
	cpu0, wall0 := processCPU(), time.Now()
	var throttled atomic.Int64
	res.Submit = drive(ctx, "POST /v1/reviews", cfg.Reviews, cfg.Concurrency, cfg.PhaseTimeout, func(ctx context.Context, i int) (time.Duration, error) {
		body, err := json.Marshal(map[string]string{
			"review_id": prefix + strconv.Itoa(i), "content_class": loadClass, "content_type": "text/plain", "content": content(i),
		})
		if err != nil {
			return 0, err
		}
		d, n, err := submit(ctx, client, svc.baseURL+"/v1/reviews", svc.submitter, body)
		throttled.Add(int64(n))
		return d, err
	})
	res.Submit.Throttled = int(throttled.Load())
	submitted := time.Now()
	res.Submitted = res.Submit.Requests - res.Submit.Errors

	if err := drain(ctx, svc, cfg, res, "review-"+prefix, submitted); err != nil {
		return res, err
	}
	res.ServiceCPU, res.ServiceWall = processCPU()-cpu0, time.Since(wall0)
	var slo projections.SLOSummary
	if err := call(ctx, client, http.MethodGet, svc.baseURL+"/v1/slo?window=1h&content_class="+loadClass, svc.auditor, nil, http.StatusOK, &slo); err != nil {
		return res, fmt.Errorf("read /v1/slo: %w", err)
	}
	res.SLO = slo
	if err := decisions(ctx, svc.pool, res, "review-"+prefix); err != nil {
		return res, err
	}
	var failed []error
	for _, p := range []phase{res.Healthz, res.Insert, res.Submit} {
		if p.Errors > 0 || p.Requests < cfg.Reviews {
			failed = append(failed, fmt.Errorf("%s: %d of %d requests made, %d failed (-phase-timeout %s); first failure: %w",
				p.Name, p.Requests, cfg.Reviews, p.Errors, cfg.PhaseTimeout, p.FirstErr))
		}
	}
	return res, errors.Join(failed...)
}

// submit posts one review, made again after the Retry-After of each 429
// answer, until it is accepted (202) or fails. It returns the latency of
// the last request and the number of 429 answers.
func submit(ctx context.Context, client *http.Client, url, token string, body []byte) (time.Duration, int, error) {
	for throttled := 0; ; throttled++ {
		d, err := timed(func() error { return call(ctx, client, http.MethodPost, url, token, body, http.StatusAccepted, nil) })
		var se *statusError
		if !errors.As(err, &se) || se.code != http.StatusTooManyRequests {
			return d, throttled, err
		}
		if err := clock.Sleep(ctx, se.retryAfter); err != nil {
			return 0, throttled + 1, fmt.Errorf("waiting out a 429: %w", err)
		}
	}
}

// drain waits until every submitted review has a finding or an escalation
// in the ledger, notes the projections' lag at that moment, then waits for
// them to catch up. Both waits together are bounded by cfg.DrainTimeout.
func drain(ctx context.Context, svc *service, cfg Config, res *Result, streamPrefix string, since time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.DrainTimeout)
	defer cancel()
	for {
		err := svc.pool.QueryRow(ctx, `SELECT count(DISTINCT stream) FROM event
			WHERE type IN ($1, $2) AND starts_with(stream, $3)`, domain.TypeFindingReceived, domain.TypeEscalated, streamPrefix).Scan(&res.Decided)
		if err != nil {
			return fmt.Errorf("drain: %d of %d reviews decided: %w", res.Decided, res.Submitted, err)
		}
		if res.Decided >= res.Submitted {
			break
		}
		if err := wait(ctx); err != nil {
			return fmt.Errorf("drain: %d of %d reviews decided after %s (-drain-timeout): %w", res.Decided, res.Submitted, cfg.DrainTimeout, err)
		}
	}
	res.DecidedAfter = time.Since(since)

	// The projections are current once their checkpoints reach the last
	// event stored. Their own lag figure reads the gap-safe global order,
	// which a long transaction anywhere on the server holds back (and then
	// shows no lag); the event table itself does not.
	var last eventstore.Position
	err := svc.pool.QueryRow(ctx, `SELECT xid::text::bigint, seq FROM event ORDER BY event.xid DESC, event.seq DESC LIMIT 1`).Scan(&last.Commit, &last.Prepare)
	if err != nil {
		return fmt.Errorf("drain: last event: %w", err)
	}
	for first := true; ; first = false {
		statuses, err := svc.projector.Status(ctx, 0)
		if err != nil {
			return fmt.Errorf("projection status: %w", err)
		}
		var behind []string
		for _, st := range statuses {
			if !st.Position.Less(last) {
				continue
			}
			behind = append(behind, st.Projection)
			if first {
				var n int64
				var age float64
				err := svc.pool.QueryRow(ctx, `SELECT count(*), coalesce(extract(epoch FROM now() - min(recorded_at)), 0)::float8
					FROM event WHERE (xid, seq) > ($1::text::xid8, $2::bigint)`, strconv.FormatUint(st.Position.Commit, 10), int64(st.Position.Prepare)).Scan(&n, &age)
				if err != nil {
					return fmt.Errorf("drain: lag of %s: %w", st.Projection, err)
				}
				res.LagEvents, res.LagSeconds = max(res.LagEvents, n), max(res.LagSeconds, age)
			}
		}
		if len(behind) == 0 {
			res.CurrentAfter = time.Since(since)
			return nil
		}
		if err := wait(ctx); err != nil {
			return fmt.Errorf("drain: projections %v behind the last event (-drain-timeout %s): %w", behind, cfg.DrainTimeout, err)
		}
	}
}

// decisions reads, from the ledger, each review's submission and decision
// times, and counts attempts, findings and escalations.
func decisions(ctx context.Context, pool *pgxpool.Pool, res *Result, streamPrefix string) error {
	rows, err := pool.Query(ctx, `SELECT s.recorded_at, d.recorded_at, d.type,
			(SELECT count(*) FROM event a WHERE a.stream = s.stream AND a.type = $4)
		FROM event s
		JOIN LATERAL (SELECT recorded_at, type FROM event e WHERE e.stream = s.stream AND e.type IN ($2, $3)
			ORDER BY revision LIMIT 1) d ON true
		WHERE s.type = $1 AND starts_with(s.stream, $5)`,
		domain.TypeSubmitted, domain.TypeFindingReceived, domain.TypeEscalated, domain.TypeAttemptStarted, streamPrefix)
	if err != nil {
		return fmt.Errorf("read decisions: %w", err)
	}
	var (
		sub, dec     time.Time
		typ          string
		attempts     int
		first, last  time.Time
		latencies    []time.Duration
		escalated    int
		attemptTotal int
	)
	_, err = pgx.ForEachRow(rows, []any{&sub, &dec, &typ, &attempts}, func() error {
		latencies = append(latencies, dec.Sub(sub))
		if first.IsZero() || sub.Before(first) {
			first = sub
		}
		if dec.After(last) {
			last = dec
		}
		if typ == domain.TypeEscalated {
			escalated++
		}
		attemptTotal += attempts
		return nil
	})
	if err != nil {
		return fmt.Errorf("read decisions: %w", err)
	}
	res.EndToEnd = latencies
	res.LedgerEscalated = escalated
	res.Attempts = attemptTotal
	if len(latencies) > 0 && last.After(first) {
		res.CompletedPerSecond = float64(len(latencies)) / last.Sub(first).Seconds()
	}
	return nil
}

// insertBaseline inserts one row per request, as many as there are
// reviews, at the same concurrency, into a table of the run's own with no
// index, then drops it.
func insertBaseline(ctx context.Context, pool *pgxpool.Pool, cfg Config, content func(int) string) (phase, error) {
	if _, err := pool.Exec(ctx, `CREATE TABLE loadgen_baseline (
		id bigint GENERATED ALWAYS AS IDENTITY, review_id text NOT NULL, body bytea NOT NULL,
		recorded_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return phase{}, fmt.Errorf("insert baseline: create table: %w", err)
	}
	p := drive(ctx, "INSERT", cfg.Reviews, cfg.Concurrency, cfg.PhaseTimeout, func(ctx context.Context, i int) (time.Duration, error) {
		return timed(func() error {
			_, err := pool.Exec(ctx, `INSERT INTO loadgen_baseline (review_id, body) VALUES ($1, $2)`, "baseline-"+strconv.Itoa(i), []byte(content(i)))
			return err
		})
	})
	if _, err := pool.Exec(ctx, `DROP TABLE loadgen_baseline`); err != nil {
		return p, fmt.Errorf("insert baseline: drop table: %w", err)
	}
	return p, nil
}

// call makes one request and checks the status; into, when not nil,
// receives the decoded JSON body.
func call(ctx context.Context, client *http.Client, method, url, token string, body []byte, want int, into any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		se := &statusError{code: resp.StatusCode, want: want, msg: fmt.Sprintf("%s %s", method, req.URL.Path), body: strings.TrimSpace(string(b))}
		if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs >= 0 {
			se.retryAfter = time.Duration(secs) * time.Second
		} else {
			se.retryAfter = time.Second
		}
		return se
	}
	if into != nil {
		return json.NewDecoder(resp.Body).Decode(into)
	}
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}

// statusError is an answer with an unexpected status.
type statusError struct {
	code, want int
	msg, body  string
	retryAfter time.Duration // Retry-After, 1s when absent
}

func (e *statusError) Error() string {
	return fmt.Sprintf("%s: status %d, want %d: %s", e.msg, e.code, e.want, e.body)
}

// wait pauses for pollInterval, or returns ctx's error.
func wait(ctx context.Context) error { return clock.Sleep(ctx, pollInterval) }
