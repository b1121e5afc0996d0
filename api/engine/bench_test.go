package engine

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/reviewledger/reviewledger/api/engine/hint"
	"github.com/reviewledger/reviewledger/cmd/benchtarget"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// BenchmarkReviewThroughput measures whole reviews per second through
// Submit, one attempt against a provider that answers at once and the
// conditional commit, on PostgreSQL, the engine running. One op is one
// review.
func BenchmarkReviewThroughput(b *testing.B) {
	for _, backend := range []string{hint.PubSubGoChannel, hint.PubSubPostgres} {
		b.Run(backend, func(b *testing.B) {
			ctx := context.Background()
			e, _, closeE, err := pgEngineOn(ctx, dbtest.URL(b), &instant{}, hint.Config{PubSub: backend}, func(c *Config) {
				c.Policy, c.Logger = fastPolicy(), testLogger()
			})
			if err != nil {
				b.Fatal(err)
			}
			defer closeE()
			runCtx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- e.Run(runCtx) }()
			b.ResetTimer()
			start := time.Now()
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				for i := 0; pb.Next(); i++ {
					id := fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), i)
					if _, _, err := e.Submit(ctx, SubmitRequest{ReviewID: id, ContentClass: "fast", Content: []byte(id)}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			for {
				left, err := e.store.Count(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if left == 0 {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "reviews/s")
			b.StopTimer()
			cancel()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}

// Targets of a hanging shadow's cost (BenchmarkReviewThroughputHangingShadow):
// the decision p99 of the shadowed class at most 10 % above the same
// class's without a shadow, and its throughput at least 90 % of it.
const (
	shadowP99RatioBound        = 1.10
	shadowThroughputRatioLeast = 0.90
)

// BenchmarkReviewThroughputHangingShadow measures, side by side, what a
// shadow provider that never answers costs the decisions of the class it
// shadows. One engine, as BenchmarkReviewThroughput's (gochannel hints),
// has two classes of the same policy: "fast" without a shadow (A) and
// "shadowed" (B), whose shadow hangs until its timeout (the class's
// attempt timeout, 300ms) in each of its shadow slots (Config.Calls, the
// default) and is skipped while they are all taken. The same load, b.N
// reviews from 16 submitters per GOMAXPROCS as BenchmarkReviewThroughput,
// runs in rounds A, B, A, B, A, B, A, B after a warm-up round of each; a round
// ends when no work record is left, and its shadow calls are let time out
// before the next one starts. A review's decision time is from its
// Submitted to its FindingReceived (or Escalated) as the ledger recorded
// them; an arm's throughput is its reviews over its rounds' time, its p99
// that of all its reviews. One op is one review of one round.
func BenchmarkReviewThroughputHangingShadow(b *testing.B) {
	const pairs = 4
	ctx := context.Background()
	shadow := &hanging{}
	url := dbtest.URL(b)
	e, _, closeE, err := pgEngine(ctx, url, &instant{}, func(c *Config) {
		c.Policy, c.Logger = fastPolicy(), testLogger()
		c.Policy.Classes["shadowed"] = c.Policy.Classes["fast"]
	}, withShadowOn("shadowed", shadow, 0))
	if err != nil {
		b.Fatal(err)
	}
	defer closeE()
	// The ledger's times are read on a pool of their own, between rounds.
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- e.Run(runCtx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}()

	type arm struct {
		name, class string
		reviews     int
		took        time.Duration
		decisions   []time.Duration
	}
	arms := [2]*arm{{name: "A (no shadow)", class: "fast"}, {name: "B (hanging shadow)", class: "shadowed"}}
	round := func(r int, a *arm, n int) (time.Duration, []time.Duration) {
		prefix := fmt.Sprintf("shadowbench-r%d-", r)
		took := submitAll(ctx, b, e, prefix, a.class, n)
		e.shadowing.Wait() // no review left to start one: the shadow calls end at their timeout
		lat, err := decisionTimes(ctx, pool, prefix)
		if err != nil {
			b.Fatal(err)
		}
		if len(lat) != n {
			b.Fatalf("round %d: %d of %d reviews decided", r, len(lat), n)
		}
		return took, lat
	}
	warm := max(b.N/4, 1)
	for i, a := range arms {
		round(-i-1, a, warm)
	}
	timedOut := func() float64 { return testutil.ToFloat64(e.metrics.shadowCalls.WithLabelValues("shadow", "timeout")) }
	skipped := func() float64 { return testutil.ToFloat64(e.metrics.shadowCalls.WithLabelValues("shadow", "skipped")) }
	timedOut0, skipped0 := timedOut(), skipped()
	b.ResetTimer()
	var pairLines []string
	for p := range pairs {
		line := fmt.Sprintf("pair %d:", p+1)
		// A B, then B A: a drift over the run (the ledger and the heap
		// grow) weighs on both arms alike.
		order := [2]int{0, 1}
		if p%2 == 1 {
			order = [2]int{1, 0}
		}
		for k, i := range order {
			a := arms[i]
			r := 2*p + k + 1
			took, lat := round(r, a, b.N)
			a.reviews, a.took, a.decisions = a.reviews+b.N, a.took+took, append(a.decisions, lat...)
			line += fmt.Sprintf(" round %d %s %.0f reviews/s, p99 %v;", r, a.name[:1], float64(b.N)/took.Seconds(), ms(benchtarget.Quantile(lat, 0.99)))
		}
		pairLines = append(pairLines, strings.TrimSuffix(line, ";"))
	}
	b.StopTimer()
	perSec := func(a *arm) float64 { return float64(a.reviews) / a.took.Seconds() }
	p99 := func(a *arm) time.Duration { return benchtarget.Quantile(a.decisions, 0.99) }
	p99Ratio := float64(p99(arms[1])) / float64(p99(arms[0]))
	rateRatio := perSec(arms[1]) / perSec(arms[0])
	b.ReportMetric(0, "ns/op") // the rounds' drains are timed too: reviews/s is the figure
	b.ReportMetric(perSec(arms[0]), "A-reviews/s")
	b.ReportMetric(perSec(arms[1]), "B-reviews/s")
	b.ReportMetric(float64(p99(arms[0]))/1e6, "A-p99-ms")
	b.ReportMetric(float64(p99(arms[1]))/1e6, "B-p99-ms")
	if b.N < 100 {
		return // the framework's first run, of one review a round, measures nothing
	}
	// Nine lines at most: the framework cuts a benchmark's log at ten.
	for _, l := range pairLines {
		b.Log(l)
	}
	shadowCalls := fmt.Sprintf("; its shadow's calls %.0f hung until their timeout, %.0f skipped (every slot taken)", timedOut()-timedOut0, skipped()-skipped0)
	for i, a := range arms {
		line := fmt.Sprintf("%s: %d rounds, %d reviews: %.0f reviews/s, decision p50 %v, p99 %v", a.name, pairs, a.reviews, perSec(a),
			ms(benchtarget.Quantile(a.decisions, 0.5)), ms(p99(a)))
		if i == 1 {
			line += shadowCalls
		}
		b.Log(line)
	}
	b.Logf("ratio B/A, decision p99: %.2f  %s", p99Ratio, benchtarget.VerdictUnder(p99Ratio, shadowP99RatioBound))
	b.Logf("ratio B/A, reviews/s: %.2f  %s", rateRatio, benchtarget.Verdict(rateRatio, shadowThroughputRatioLeast))
	b.Logf("target: decision p99 ratio B/A < %.2f, reviews/s ratio B/A >= %.2f", shadowP99RatioBound, shadowThroughputRatioLeast)
}

// ms is d in milliseconds to two decimals, as the figures print it.
func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d)/1e6) }

// submitAll submits n reviews of class, their IDs prefix and a number,
// from 16 submitters per GOMAXPROCS (BenchmarkReviewThroughput's
// RunParallel), and returns the time until no work record is left.
func submitAll(ctx context.Context, b *testing.B, e *Engine, prefix, class string, n int) time.Duration {
	b.Helper()
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	start := time.Now()
	for range min(16*runtime.GOMAXPROCS(0), n) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				id := fmt.Sprintf("%s%d", prefix, i)
				if _, _, err := e.Submit(ctx, SubmitRequest{ReviewID: id, ContentClass: class, Content: []byte(id)}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	for {
		left, err := e.store.Count(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if left == 0 {
			return time.Since(start)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// decisionTimes are the decision times of the reviews whose IDs start
// with prefix: from each one's Submitted to its first FindingReceived or
// Escalated, as the ledger of the database at pool recorded them.
func decisionTimes(ctx context.Context, pool *pgxpool.Pool, prefix string) ([]time.Duration, error) {
	rows, err := pool.Query(ctx, `SELECT d.recorded_at - s.recorded_at
		FROM event s
		JOIN LATERAL (SELECT recorded_at FROM event e WHERE e.stream = s.stream AND e.type IN ($2, $3)
			ORDER BY revision LIMIT 1) d ON true
		WHERE s.type = $1 AND starts_with(s.stream, $4)`,
		domain.TypeSubmitted, domain.TypeFindingReceived, domain.TypeEscalated, domain.StreamName(prefix))
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[time.Duration])
}
