package engine

import (
	"sync"
	"time"
)

// retryBudget limits retries to a share of recent attempts to one
// provider, as Envoy's retry budgets and failsafe-go's do: a retry is
// allowed while the retries in the window stay below max(minRetries,
// ratio × attempts in the window). So a provider outage costs at most
// (1 + ratio) times the normal load instead of max_attempts times.
//
// The window is split into ten buckets that expire one by one.
type retryBudget struct {
	mu         sync.Mutex
	ratio      float64
	minRetries int
	bucket     time.Duration
	buckets    [10]budgetBucket
}

type budgetBucket struct {
	start    time.Time // truncated to the bucket width
	attempts int
	retries  int
}

func newRetryBudget(ratio float64, window time.Duration, minRetries int) *retryBudget {
	return &retryBudget{ratio: ratio, minRetries: minRetries, bucket: max(window/10, time.Millisecond)}
}

func (b *retryBudget) slot(now time.Time) *budgetBucket {
	start := now.Truncate(b.bucket)
	i := int(start.UnixNano()/int64(b.bucket)) % len(b.buckets)
	if i < 0 {
		i += len(b.buckets)
	}
	if !b.buckets[i].start.Equal(start) {
		b.buckets[i] = budgetBucket{start: start}
	}
	return &b.buckets[i]
}

// totals returns the attempts and retries in the window ending at now.
func (b *retryBudget) totals(now time.Time) (attempts, retries int) {
	oldest := now.Truncate(b.bucket).Add(-time.Duration(len(b.buckets)-1) * b.bucket)
	for _, x := range b.buckets {
		if !x.start.Before(oldest) && !x.start.After(now) {
			attempts += x.attempts
			retries += x.retries
		}
	}
	return attempts, retries
}

// take counts a retry made at now if it fits the budget, and reports
// whether it did. Allowing and counting in one step means reviews retrying
// at the same moment can never overshoot the budget together.
func (b *retryBudget) take(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	attempts, retries := b.totals(now)
	if float64(retries) >= max(float64(b.minRetries), b.ratio*float64(attempts)) {
		return false
	}
	x := b.slot(now)
	x.attempts++
	x.retries++
	return true
}

// record counts an attempt at now that is not a retry.
func (b *retryBudget) record(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.slot(now).attempts++
}

// snapshot returns the window's attempts and retries.
func (b *retryBudget) snapshot(now time.Time) (attempts, retries int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.totals(now)
}
