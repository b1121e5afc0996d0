package projections

import "math"

// Histograms count durations in fixed log-spaced buckets: bucket 0 holds
// everything up to 1 ms, bucket b (1 ≤ b < numBuckets-1) the durations in
// (2^((b-1)/4), 2^(b/4)] ms, and the last bucket everything longer than
// 2^((numBuckets-2)/4) ms (about 70 minutes). Four buckets per doubling
// keep the relative error of an estimate within 2^(1/8)-1 ≈ 9.05% (see
// estimate).
const (
	bucketsPerDoubling = 4
	numBuckets         = 90
)

// bucketOf returns the bucket of a duration of ms milliseconds.
func bucketOf(ms float64) int {
	if ms <= 1 {
		return 0
	}
	b := int(math.Ceil(bucketsPerDoubling * math.Log2(ms)))
	// Floating-point rounding may put an exact bound one bucket too high.
	if b > 0 && math.Exp2(float64(b-1)/bucketsPerDoubling) >= ms {
		b--
	}
	return min(max(b, 1), numBuckets-1)
}

// estimate returns the value reported for samples in bucket b: the
// geometric middle of its bounds, which is within a factor of 2^(1/8) of
// every value the bucket holds. Bucket 0 reports 1 ms (an absolute error
// below 1 ms); the last bucket reports its lower bound, so values beyond the
// range are underestimated.
func estimate(b int) float64 {
	switch {
	case b <= 0:
		return 1
	case b >= numBuckets-1:
		return math.Exp2(float64(numBuckets-2) / bucketsPerDoubling)
	}
	return math.Exp2((2*float64(b) - 1) / (2 * bucketsPerDoubling))
}

// histogram is a count per bucket.
type histogram [numBuckets]int64

func (h *histogram) total() int64 {
	var n int64
	for _, c := range h {
		n += c
	}
	return n
}

// quantile returns the estimated q-quantile (0 < q ≤ 1) in milliseconds,
// rounded to 0.01 ms: the estimate of the bucket holding the sample of rank
// ⌈q·n⌉. It is 0 for an empty histogram.
func (h *histogram) quantile(q float64) float64 {
	n := h.total()
	if n == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(n)))
	rank = min(max(rank, 1), n)
	var seen int64
	for b, c := range h {
		seen += c
		if seen >= rank {
			return math.Round(estimate(b)*100) / 100
		}
	}
	return math.Round(estimate(numBuckets-1)*100) / 100
}

// percentiles are h's p50, p90 and p99; zero for a nil or empty h.
func (h *histogram) percentiles() Percentiles {
	if h == nil {
		return Percentiles{}
	}
	return Percentiles{P50: h.quantile(0.50), P90: h.quantile(0.90), P99: h.quantile(0.99)}
}

// ratio is a / b, 0 when b is.
func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// ratioOrNil is a / b, nil when b is 0.
func ratioOrNil(a, b int64) *float64 {
	if b == 0 {
		return nil
	}
	return ptr(float64(a) / float64(b))
}
