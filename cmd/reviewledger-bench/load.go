package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/cmd/benchtarget"
	"github.com/reviewledger/reviewledger/eventstore/clock"
)

// figures are what one round measured.
type figures struct {
	Reviews   int
	Elapsed   time.Duration
	PerSecond float64
	P50, P99  time.Duration // server-side submit → decision
	CPU       cpuShare      // per review: the server's, PostgreSQL's, the bench's
	PeakRSS   uint64        // the server's
	Commits   commits       // the server's group commit during the round
}

// view is the part of the review view the bench reads.
type view struct {
	State       string     `json:"state"`
	SubmittedAt time.Time  `json:"submitted_at"`
	DecidedAt   *time.Time `json:"decided_at"`
}

// client submits reviews and reads them back through the public API.
type client struct {
	http    *http.Client
	base    string
	token   string
	runID   string
	observe string // observeSubmit or observeGet
}

// How the bench learns a decision: the submit waits for it
// (POST /v1/reviews?wait=30s), or a long-poll after the submit
// (GET /v1/reviews/{id}?wait=30s).
const (
	observeSubmit = "submit"
	observeGet    = "get"
)

func newClient(base, token string, conns int, observe string) *client {
	return &client{
		http: &http.Client{Timeout: 60 * time.Second, Transport: loopbackTransport(2 * conns)},
		base: base, token: token, runID: randomHex(4), observe: observe,
	}
}

func (c *client) id(i int) string { return "bench-" + c.runID + "-" + strconv.Itoa(i) }

// loopbackTransport keeps up to conns connections open to one host on
// loopback, rather than dialling anew for each request.
func loopbackTransport(conns int) *http.Transport {
	return &http.Transport{Proxy: nil, MaxIdleConns: conns, MaxIdleConnsPerHost: conns, IdleConnTimeout: time.Minute}
}

// crudSchema is the CRUD baseline's table, which the CRUD table floor
// (floor.go) uses too.
const crudSchema = `CREATE TABLE IF NOT EXISTS review (id text PRIMARY KEY, state text NOT NULL, attempts int NOT NULL, updated_at timestamptz NOT NULL)`

// review submits review i, waits for its decision and returns the view:
// the submit's own answer when it waits, then a long-poll
// (GET ?wait=30s) until the review leaves pending. A submit answered 429
// or 503 is made again.
func (c *client) review(ctx context.Context, i int) (view, error) {
	id := c.id(i)
	body, _ := json.Marshal(map[string]string{"review_id": id, "content_class": benchClass, "content_type": "text/plain",
		"content": "bench caption " + id + ": the quick brown fox jumps over the lazy dog"})
	path := "/v1/reviews"
	if c.observe == observeSubmit {
		path += "?wait=30s"
	}
	var v view
	for {
		status, b, err := c.do(ctx, http.MethodPost, path, body)
		if err != nil {
			return view{}, err
		}
		if status == http.StatusAccepted || status == http.StatusOK {
			if err := json.Unmarshal(b, &v); err != nil {
				return view{}, fmt.Errorf("submit %s: %w", id, err)
			}
			break
		}
		if status != http.StatusTooManyRequests && status != http.StatusServiceUnavailable {
			return view{}, fmt.Errorf("submit %s: HTTP %d %s", id, status, b)
		}
		if err := clock.Sleep(ctx, 50*time.Millisecond); err != nil {
			return view{}, err
		}
	}
	for v.State == "pending" {
		// A long-poll: answered once the review leaves pending.
		status, b, err := c.do(ctx, http.MethodGet, "/v1/reviews/"+id+"?wait=30s", nil)
		if err != nil {
			return view{}, err
		}
		if status != http.StatusOK {
			return view{}, fmt.Errorf("read %s: HTTP %d %s", id, status, b)
		}
		if err := json.Unmarshal(b, &v); err != nil {
			return view{}, fmt.Errorf("read %s: %w", id, err)
		}
	}
	return v, nil
}

func (c *client) do(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, b, err
}

// tally adds what became of review i (its view v, or err) to the
// latencies of the reviews accepted or to the errors.
func tally(c *client, i int, v view, err error, latencies []time.Duration, errs []error) ([]time.Duration, []error) {
	switch {
	case err != nil:
		return latencies, append(errs, err)
	case v.State != "accepted" || v.DecidedAt == nil:
		return latencies, append(errs, fmt.Errorf("%s ended %s", c.id(i), v.State))
	}
	return append(latencies, v.DecidedAt.Sub(v.SubmittedAt)), errs
}

// closedLoop runs n reviews from clients goroutines, each submitting its
// next review once its last was decided, and returns their latencies.
func closedLoop(ctx context.Context, c *client, first, n, clients int) ([]time.Duration, error) {
	var (
		next      atomic.Int64
		mu        sync.Mutex
		latencies = make([]time.Duration, 0, n)
		errs      []error
		wg        sync.WaitGroup
	)
	next.Store(int64(first))
	for range clients {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= first+n || ctx.Err() != nil {
					return
				}
				v, err := c.review(ctx, i)
				mu.Lock()
				latencies, errs = tally(c, i, v, err, latencies, errs)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return latencies, fmt.Errorf("%d of %d reviews failed; first: %w", len(errs), n, errs[0])
	}
	if len(latencies) < n {
		return latencies, fmt.Errorf("%d of %d reviews run: %w", len(latencies), n, context.Cause(ctx))
	}
	return latencies, nil
}

// openLoop submits reviews at rate per second, each from a goroutine of
// its own, for d, and returns their latencies and the arrivals not sent.
func openLoop(ctx context.Context, c *client, first int, rate float64, d time.Duration) ([]time.Duration, unsent, error) {
	end := time.Now().Add(d)
	return openLoopUntil(ctx, c, first, rate, maxInFlight, func(at time.Time) bool { return !at.Before(end) })
}

// maxInFlight bounds the reviews an open loop has in flight at once: an
// arrival finding that many unanswered is not sent but counted (the
// service fell behind the rate), instead of opening sockets until the
// process runs out of files.
const maxInFlight = 2048

// unsent are the arrivals of an open loop that were not sent because
// limit (maxInFlight) were unanswered, and when the first and the last of
// them were due: the moments the service fell behind, to set beside what
// the server was doing then.
type unsent struct {
	n           int
	first, last time.Time
}

func (u *unsent) add(at time.Time) {
	if u.n == 0 {
		u.first = at
	}
	u.last = at
	u.n++
}

// String is "46, due from 14:12:03 to 14:12:07 UTC".
func (u unsent) String() string {
	const hms = "15:04:05"
	return fmt.Sprintf("%d, due from %s to %s UTC", u.n, u.first.UTC().Format(hms), u.last.UTC().Format(hms))
}

// openLoopUntil submits reviews at rate per second, each from a goroutine
// of its own, until done says the next arrival is past the end, and
// returns their latencies and the arrivals not sent because limit
// (maxInFlight) were unanswered.
func openLoopUntil(ctx context.Context, c *client, first int, rate float64, limit int64, done func(next time.Time) bool) ([]time.Duration, unsent, error) {
	var (
		mu        sync.Mutex
		latencies []time.Duration
		errs      []error
		wg        sync.WaitGroup
		inFlight  atomic.Int64
		behind    unsent
	)
	rng := rand.New(rand.NewPCG(1, 2))
	at := time.Now()
	for i := first; !done(at) && ctx.Err() == nil; i++ {
		if err := clock.Sleep(ctx, time.Until(at)); err != nil {
			break
		}
		if inFlight.Load() >= limit {
			behind.add(at)
		} else {
			inFlight.Add(1)
			wg.Go(func() {
				defer inFlight.Add(-1)
				v, err := c.review(ctx, i)
				mu.Lock()
				defer mu.Unlock()
				latencies, errs = tally(c, i, v, err, latencies, errs)
			})
		}
		// Poisson arrivals at the rate.
		at = at.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
	}
	wg.Wait()
	if len(errs) > 0 {
		return latencies, behind, fmt.Errorf("%d reviews failed; first: %w", len(errs), errs[0])
	}
	if err := ctx.Err(); err != nil {
		return latencies, behind, fmt.Errorf("cut short after %d reviews: %w", len(latencies), err)
	}
	return latencies, behind, nil
}

// reviewledgerRound runs one round of reviewledger on a fresh database and
// server.
func reviewledgerRound(ctx context.Context, cfg Config) (figures, *server, func() error, error) {
	return serviceRound(ctx, cfg, "")
}

// floorRound runs one round of a floor (floor.go) on a fresh database and
// server.
func floorRound(ctx context.Context, cfg Config, mode string) (figures, error) {
	cfg.Profile = ""
	f, _, cleanup, err := serviceRound(ctx, cfg, mode)
	if cleanup != nil {
		err = errors.Join(err, cleanup())
	}
	if err != nil {
		return figures{}, fmt.Errorf("floor %s: %w", mode, err)
	}
	return f, nil
}

// serviceRound runs one round of reviewledger, or of a floor's server,
// on a fresh database and server.
func serviceRound(ctx context.Context, cfg Config, floorMode string) (figures, *server, func() error, error) {
	dbURL, drop, err := database(ctx, cfg.AdminURL)
	if err != nil {
		return figures{}, nil, nil, err
	}
	prov, provURL, err := instantProvider()
	if err != nil {
		return figures{}, nil, nil, errors.Join(err, drop())
	}
	srv, err := startServer(ctx, cfg, floorMode, dbURL, provURL)
	if err != nil {
		_ = prov.Close()
		return figures{}, nil, nil, errors.Join(err, drop())
	}
	cleanup := func() error {
		err := srv.stop()
		_ = prov.Close()
		return errors.Join(err, drop())
	}
	c := newClient(srv.URL, srv.token, cfg.Clients, cfg.Observe)
	rctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	// A short warm-up: connections opened, code paths run once.
	warm := min(200, cfg.Reviews/10+1)
	if _, err := closedLoop(rctx, c, 0, warm, cfg.Clients); err != nil {
		return figures{}, srv, cleanup, fmt.Errorf("warm-up: %w", err)
	}
	meter := &cpuMeter{server: srv.cpu, pg: cfg.pg}
	if err := meter.start(); err != nil {
		return figures{}, srv, cleanup, err
	}
	profiled := make(chan error, 1)
	if srv.debug != "" {
		go func() { profiled <- srv.profile(rctx, 5, cfg.Profile) }()
	} else {
		profiled <- nil
	}
	// A floor has no group commit to read.
	readCommits := srv.commits
	if floorMode != "" {
		readCommits = func(context.Context) (commits, error) { return commits{}, nil }
	}
	before, err := readCommits(rctx)
	if err != nil {
		return figures{}, srv, cleanup, err
	}
	start := time.Now()
	latencies, err := closedLoop(rctx, c, warm, cfg.Reviews, cfg.Clients)
	elapsed := time.Since(start)
	if err != nil {
		return figures{}, srv, cleanup, err
	}
	// Read before waiting for a profile, which goes on past a short round.
	after, err := readCommits(rctx)
	if err != nil {
		return figures{}, srv, cleanup, err
	}
	share, err := meter.perReview(cfg.Reviews)
	if err != nil {
		return figures{}, srv, cleanup, err
	}
	if err := <-profiled; err != nil {
		return figures{}, srv, cleanup, fmt.Errorf("profile: %w", err)
	}
	rss, err := srv.peakRSS()
	if err != nil {
		return figures{}, srv, cleanup, err
	}
	f := figures{Reviews: cfg.Reviews, Elapsed: elapsed, PerSecond: float64(cfg.Reviews) / elapsed.Seconds(),
		CPU: share, PeakRSS: rss, Commits: after.minus(before)}
	f.P50, f.P99 = benchtarget.Quantile(latencies, 0.5), benchtarget.Quantile(latencies, 0.99)
	return f, srv, cleanup, nil
}

// crudRound runs the naive table on a fresh database: per review an INSERT
// (pending), an UPDATE (attempts) and an UPDATE (state), each its own
// autocommit statement, from clients connections.
func crudRound(ctx context.Context, cfg Config) (figures, error) {
	dbURL, drop, err := database(ctx, cfg.AdminURL)
	if err != nil {
		return figures{}, err
	}
	defer func() { _ = drop() }()
	pc, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return figures{}, err
	}
	pc.MaxConns = int32(cfg.CRUDClients)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return figures{}, err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, crudSchema); err != nil {
		return figures{}, err
	}
	rctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	one := func(i int) error {
		id := "crud-" + strconv.Itoa(i)
		if _, err := pool.Exec(rctx, `INSERT INTO review (id, state, attempts, updated_at) VALUES ($1, 'pending', 0, now())`, id); err != nil {
			return err
		}
		if _, err := pool.Exec(rctx, `UPDATE review SET attempts = attempts + 1, updated_at = now() WHERE id = $1`, id); err != nil {
			return err
		}
		_, err := pool.Exec(rctx, `UPDATE review SET state = 'accepted', updated_at = now() WHERE id = $1 AND state = 'pending'`, id)
		return err
	}
	var next atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	run := func(first, n int) {
		next.Store(int64(first))
		for range cfg.CRUDClients {
			wg.Go(func() {
				for {
					i := int(next.Add(1)) - 1
					if i >= first+n {
						return
					}
					if err := one(i); err != nil {
						firstErr.CompareAndSwap(nil, err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	warm := min(200, cfg.Reviews/10+1)
	run(0, warm)
	meter := &cpuMeter{pg: cfg.pg}
	if err := meter.start(); err != nil {
		return figures{}, err
	}
	start := time.Now()
	run(warm, cfg.Reviews)
	elapsed := time.Since(start)
	if err, _ := firstErr.Load().(error); err != nil {
		return figures{}, fmt.Errorf("CRUD baseline: %w", err)
	}
	share, err := meter.perReview(cfg.Reviews)
	if err != nil {
		return figures{}, err
	}
	return figures{Reviews: cfg.Reviews, Elapsed: elapsed, PerSecond: float64(cfg.Reviews) / elapsed.Seconds(), CPU: share}, nil
}
