package domain_test

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/domain"
)

// fixedRand returns n-1-back from every Int64N(n), clamped to [0, n), and
// records the bound it was asked for.
type fixedRand struct {
	back  int64
	bound int64
	calls int
}

func (f *fixedRand) Int64N(n int64) int64 {
	f.calls++
	f.bound = n
	return max(0, n-1-f.back)
}

func TestAttemptTimeout(t *testing.T) {
	t.Parallel()
	deadline := at(30 * time.Second)
	for _, tc := range []struct {
		name string
		cap  time.Duration
		now  time.Time
		want time.Duration
	}{
		{"cap below the time remaining", 10 * time.Second, t0, 10 * time.Second},
		{"time remaining below the cap", 10 * time.Second, at(25 * time.Second), 5 * time.Second},
		{"cap equal to the time remaining", 10 * time.Second, at(20 * time.Second), 10 * time.Second},
		{"one nanosecond left", 10 * time.Second, deadline.Add(-1), 1},
		{"at the deadline", 10 * time.Second, deadline, 0},
		{"past the deadline", 10 * time.Second, at(31 * time.Second), -time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := domain.AttemptTimeout(tc.cap, tc.now, deadline); got != tc.want {
				t.Fatalf("AttemptTimeout = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestBackoffDelay(t *testing.T) {
	t.Parallel()
	b := domain.Backoff{Initial: 100 * time.Millisecond, Max: 2 * time.Second}
	for _, tc := range []struct {
		n    int
		want time.Duration
	}{
		{0, 100 * time.Millisecond},
		{1, 100 * time.Millisecond},
		{2, 200 * time.Millisecond},
		{3, 400 * time.Millisecond},
		{4, 800 * time.Millisecond},
		{5, 1600 * time.Millisecond},
		{6, 2 * time.Second},
		{7, 2 * time.Second},
		{64, 2 * time.Second},
		{1000, 2 * time.Second},
	} {
		if got := b.Delay(tc.n, nil); got != tc.want {
			t.Errorf("Delay(%d) = %s, want %s", tc.n, got, tc.want)
		}
	}

	t.Run("doubling never overflows a very large max", func(t *testing.T) {
		t.Parallel()
		huge := domain.Backoff{Initial: time.Hour, Max: time.Duration(math.MaxInt64)}
		prev := time.Duration(0)
		for n := 1; n <= 100; n++ {
			d := huge.Delay(n, nil)
			if d < prev || d > huge.Max {
				t.Fatalf("Delay(%d) = %s after %s; want non-decreasing, at most %s", n, d, prev, huge.Max)
			}
			prev = d
		}
		if prev != huge.Max {
			t.Fatalf("Delay(100) = %s, want the max %s", prev, huge.Max)
		}
	})

	t.Run("jitter is drawn from the source below the jitter bound", func(t *testing.T) {
		t.Parallel()
		j := domain.Backoff{Initial: 100 * time.Millisecond, Max: 2 * time.Second, Jitter: 75 * time.Millisecond}
		high := &fixedRand{}
		if got, want := j.Delay(2, high), 200*time.Millisecond+75*time.Millisecond-1; got != want {
			t.Fatalf("Delay with the largest jitter = %s, want %s", got, want)
		}
		if high.bound != int64(75*time.Millisecond) {
			t.Fatalf("jitter drawn from [0, %d), want [0, %d)", high.bound, int64(75*time.Millisecond))
		}
		if got := j.Delay(9, &fixedRand{back: math.MaxInt64}); got != 2*time.Second {
			t.Fatalf("Delay with zero jitter = %s, want the max", got)
		}
		if got := j.Delay(2, nil); got != 200*time.Millisecond {
			t.Fatalf("Delay without a source = %s, want no jitter", got)
		}
		none := &fixedRand{}
		if b.Delay(3, none); none.calls != 0 {
			t.Fatal("a backoff without jitter drew from the source")
		}
	})

	t.Run("seeded jitter stays within [0, jitter) and spreads", func(t *testing.T) {
		t.Parallel()
		const seed = 20260301
		src := rand.New(rand.NewPCG(seed, seed))
		j := domain.Backoff{Initial: 100 * time.Millisecond, Max: 2 * time.Second, Jitter: 75 * time.Millisecond}
		var lo, hi time.Duration = j.Jitter, -1
		for i := range 10000 {
			n := 1 + i%8
			base := j.Delay(n, nil)
			jitter := j.Delay(n, src) - base
			if jitter < 0 || jitter >= j.Jitter {
				t.Fatalf("seed %d draw %d: jitter %s outside [0, %s)", seed, i, jitter, j.Jitter)
			}
			lo, hi = min(lo, jitter), max(hi, jitter)
		}
		// 10000 uniform draws cover all but a sliver of the range.
		if lo > time.Millisecond || hi < j.Jitter-time.Millisecond {
			t.Fatalf("seed %d: jitter spans only [%s, %s] of [0, %s)", seed, lo, hi, j.Jitter)
		}
	})
}

func TestRetryWait(t *testing.T) {
	t.Parallel()
	deadline := at(30 * time.Second)
	for _, tc := range []struct {
		name                string
		now                 time.Time
		backoff, retryAfter time.Duration
		wait                time.Duration
		ok                  bool
	}{
		{"backoff within the budget", at(10 * time.Second), 200 * time.Millisecond, 0, 200 * time.Millisecond, true},
		{"no wait with time left", at(10 * time.Second), 0, 0, 0, true},
		{"retry-after longer than the backoff is honoured", at(10 * time.Second), 200 * time.Millisecond, 5 * time.Second, 5 * time.Second, true},
		{"retry-after shorter than the backoff waits the backoff", at(10 * time.Second), 2 * time.Second, time.Second, 2 * time.Second, true},
		{"wait ending just before the deadline", at(25 * time.Second), time.Second, 5*time.Second - 1, 5*time.Second - 1, true},
		{"backoff reaching the deadline", at(28 * time.Second), 2 * time.Second, 0, 0, false},
		{"backoff past the deadline", at(29 * time.Second), 2 * time.Second, 0, 0, false},
		{"retry-after reaching the deadline", at(25 * time.Second), 100 * time.Millisecond, 5 * time.Second, 0, false},
		{"retry-after past the deadline", at(10 * time.Second), 100 * time.Millisecond, time.Hour, 0, false},
		{"no wait at the deadline", deadline, 0, 0, 0, false},
		{"no wait past the deadline", at(31 * time.Second), 0, 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			wait, ok := domain.RetryWait(tc.now, deadline, tc.backoff, tc.retryAfter)
			if wait != tc.wait || ok != tc.ok {
				t.Fatalf("RetryWait = %s, %t; want %s, %t", wait, ok, tc.wait, tc.ok)
			}
		})
	}
}

// TestRetryLoopStaysWithinDeadline drives the retry arithmetic the way a
// runner does, with seeded random service times and Retry-After values,
// and checks that no attempt and no wait ever reaches past the deadline and
// that attempts never exceed max_attempts.
func TestRetryLoopStaysWithinDeadline(t *testing.T) {
	t.Parallel()
	const seed = 7
	rng := rand.New(rand.NewPCG(seed, 0))
	for run := range 2000 {
		p := randomPolicy(rng)
		deadline := t0.Add(p.Budget)
		now := t0
		attempts := 0
		for {
			timeout := domain.AttemptTimeout(p.AttemptTimeout, now, deadline)
			if timeout <= 0 || attempts == p.MaxAttempts {
				break
			}
			attempts++
			if timeout > p.AttemptTimeout {
				t.Fatalf("seed %d run %d: attempt timeout %s above the cap %s", seed, run, timeout, p.AttemptTimeout)
			}
			now = now.Add(time.Duration(rng.Int64N(int64(timeout) + 1)))
			if now.After(deadline) {
				t.Fatalf("seed %d run %d: attempt %d ended at %s, past the deadline %s", seed, run, attempts, now.Sub(t0), p.Budget)
			}
			var retryAfter time.Duration
			if rng.IntN(3) == 0 {
				retryAfter = time.Duration(rng.Int64N(int64(p.Budget)))
			}
			wait, ok := domain.RetryWait(now, deadline, p.Backoff.Delay(attempts, rng), retryAfter)
			if !ok {
				break
			}
			if wait < retryAfter {
				t.Fatalf("seed %d run %d: wait %s shorter than Retry-After %s", seed, run, wait, retryAfter)
			}
			now = now.Add(wait)
			if !now.Before(deadline) {
				t.Fatalf("seed %d run %d: retry at %s, not before the deadline %s", seed, run, now.Sub(t0), p.Budget)
			}
		}
		if attempts < 1 || attempts > p.MaxAttempts {
			t.Fatalf("seed %d run %d: %d attempts with max_attempts %d", seed, run, attempts, p.MaxAttempts)
		}
	}
}

// randomPolicy draws a valid class policy in whole milliseconds.
func randomPolicy(rng *rand.Rand) domain.ClassPolicy {
	ms := func(lo, hi int64) time.Duration { return time.Duration(lo+rng.Int64N(hi-lo+1)) * time.Millisecond }
	budget := ms(1, 60000)
	initial := ms(1, 2000)
	p := domain.ClassPolicy{
		Budget:         budget,
		AttemptTimeout: ms(1, int64(budget/time.Millisecond)),
		MaxAttempts:    1 + rng.IntN(5),
		Backoff:        domain.Backoff{Initial: initial, Max: initial + ms(0, 5000), Jitter: ms(0, 100)},
		OnExhaustion:   domain.ExhaustToManualReview,
		HumanGate:      rng.IntN(3) == 0,
		Priority:       rng.IntN(5),
		Approvals:      rng.IntN(3),
	}
	if rng.IntN(2) == 0 {
		p.OnExhaustion = domain.ExhaustToRejected
	}
	return p
}
