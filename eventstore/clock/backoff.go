package clock

import (
	"time"

	"github.com/reviewledger/reviewledger/domain"
)

// Backoff is the one wait between tries of something failing that the
// service and its clients retry (a webhook delivery, a store operation, a
// client's request): after the n-th failed try (n from 1), initial doubled
// for every failure before it, at most maxWait (domain.Doubled), less up
// to half of it by jitter (in [0, 1): 0 for none, a random draw so that
// callers failing together do not come back together), and never less
// than floor (a server's Retry-After; 0 for none). The provider's retries
// follow the review policy's own backoff instead (domain.Backoff, the
// same doubling), whose jitter is drawn from the review so that every
// process and every replay agree.
func Backoff(initial, maxWait time.Duration, n int, jitter float64, floor time.Duration) time.Duration {
	d := domain.Doubled(initial, maxWait, n)
	d -= time.Duration(float64(d/2) * jitter)
	return max(d, floor)
}
