package domain

import "time"

// Rand is the source of jitter. *math/rand/v2.Rand satisfies it; tests pass
// a seeded one.
type Rand interface {
	// Int64N returns a uniform value in [0, n); n > 0.
	Int64N(n int64) int64
}

// AttemptTimeout is the timeout of the next attempt: the per-attempt cap or
// the time remaining until the deadline, whichever is smaller. It is zero or
// negative when no time remains.
func AttemptTimeout(attemptCap time.Duration, now, deadline time.Time) time.Duration {
	return min(attemptCap, deadline.Sub(now))
}

// Delay is the backoff before retry number n (n = 1 before the second
// attempt): min(Max, Initial·2^(n-1)) (Doubled) plus jitter drawn from src
// in [0, Jitter).
func (b Backoff) Delay(n int, src Rand) time.Duration {
	d := Doubled(b.Initial, b.Max, n)
	if b.Jitter > 0 && src != nil {
		d += time.Duration(src.Int64N(int64(b.Jitter)))
	}
	return d
}

// Doubled is the one doubling of every backoff: the wait after the n-th
// failed try (n from 1), initial doubled for every failure before it, at
// most maxWait, never overflowing however large maxWait is. Delay adds
// the review's jitter to it, drawn from the review so that every process
// and every replay agree; clock.Backoff, the wait of the service's other
// retries, takes a random part off it.
func Doubled(initial, maxWait time.Duration, n int) time.Duration {
	d := initial
	for i := 1; i < n && d < maxWait; i++ {
		if d > maxWait/2 {
			return maxWait // doubling would pass the cap, or overflow for a huge one
		}
		d *= 2
	}
	return min(d, maxWait)
}

// RetryWait decides whether another attempt may follow and how long to wait
// first. backoff is the computed backoff delay, retryAfter the provider's
// Retry-After (zero when it gave none). The wait is the larger of the two.
// No retry is made when the wait would reach the deadline: a Retry-After is
// honoured only within the remaining budget.
func RetryWait(now, deadline time.Time, backoff, retryAfter time.Duration) (wait time.Duration, ok bool) {
	wait = max(backoff, retryAfter)
	if !now.Add(wait).Before(deadline) {
		return 0, false
	}
	return wait, true
}
