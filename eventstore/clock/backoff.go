package clock

import "time"

// Backoff is the one wait between tries of something failing that the
// service and its clients retry (a webhook delivery, a store operation, a
// client's request): after the n-th failed try (n from 1), initial doubled
// for every failure before it, at most maxWait, less up to half of it by
// jitter (in [0, 1): 0 for none, a random draw so that callers failing
// together do not come back together), and never less than floor (a
// server's Retry-After; 0 for none). The provider's retries follow the
// review policy's own backoff instead (domain.Backoff), whose jitter is
// drawn from the review so that every process and every replay agree.
func Backoff(initial, maxWait time.Duration, n int, jitter float64, floor time.Duration) time.Duration {
	d := initial
	for i := 1; i < n && d < maxWait; i++ {
		if d > maxWait/2 {
			d = maxWait // doubling would pass the cap, or overflow
			break
		}
		d *= 2
	}
	d = min(d, maxWait)
	d -= time.Duration(float64(d/2) * jitter)
	return max(d, floor)
}
