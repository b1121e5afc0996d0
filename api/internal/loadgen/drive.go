package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// phase is the outcome of one request loop.
type phase struct {
	Name      string
	Requests  int // made (answered or failed), not counting retries after 429
	Errors    int // failed or answered with an unexpected status
	Throttled int // answered 429 and made again after Retry-After
	FirstErr  error
	Elapsed   time.Duration
	latencies []time.Duration
}

// PerSecond is the completed requests per second.
func (p phase) PerSecond() float64 {
	if p.Elapsed <= 0 {
		return 0
	}
	return float64(p.Requests-p.Errors) / p.Elapsed.Seconds()
}

// Quantile returns the q-quantile (nearest rank) of the request latencies.
func (p phase) Quantile(q float64) time.Duration { return quantile(p.latencies, q) }

// drive calls do for i = 0..n-1 from conc goroutines and stops when all n
// are made, the phase has run for limit, or ctx is done, whichever comes
// first. do returns the latency to record for request i (see timed).
func drive(ctx context.Context, name string, n, conc int, limit time.Duration, do func(ctx context.Context, i int) (time.Duration, error)) phase {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	lat := make([]time.Duration, n)
	var (
		next   atomic.Int64
		made   atomic.Int64
		errs   atomic.Int64
		once   sync.Once
		first  error
		wg     sync.WaitGroup
		failed = make([]bool, n)
	)
	start := time.Now()
	for range min(conc, n) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				d, err := do(ctx, i)
				lat[i] = d
				made.Add(1)
				if err != nil {
					failed[i] = true
					errs.Add(1)
					once.Do(func() { first = fmt.Errorf("%s request %d: %w", name, i, err) })
				}
			}
		})
	}
	wg.Wait()
	p := phase{Name: name, Requests: int(made.Load()), Errors: int(errs.Load()), FirstErr: first, Elapsed: time.Since(start)}
	m := min(int(next.Load()), n)
	for i := range m {
		if !failed[i] {
			p.latencies = append(p.latencies, lat[i])
		}
	}
	return p
}

// quantile returns the q-quantile of ds by nearest rank; zero when empty.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// timed runs f and returns how long it took.
func timed(f func() error) (time.Duration, error) {
	t0 := time.Now()
	err := f()
	return time.Since(t0), err
}
