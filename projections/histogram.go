package projections

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

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

// A histogram table holds one row a histogram (migrations 0027, 0061): its
// key columns, then buckets (the bucket numbers that counted, ascending)
// and counts (the count of each, at the same index).

// histogramRows is the FROM item of a histogram table's rows, one a bucket
// that counted, as the columns bucket and n beside the table's own.
func histogramRows(table string) string {
	return table + `, unnest(` + table + `.buckets, ` + table + `.counts) AS u(bucket, n)`
}

// histogramColumn is a key column of a histogram table and its type.
type histogramColumn struct{ name, typ string }

// queueHistograms adds counts to the histograms of table: the i-th count
// goes to bucket buckets[i] of the histogram keyed by the i-th value of
// each of keys (one slice a column of cols, in order), which must not
// repeat a bucket of a key. Each histogram is one upsert, its buckets
// added to the stored ones by histogram_add.
func queueHistograms(batch *pgx.Batch, table string, cols []histogramColumn, keys []any, buckets []int16, counts []int64) {
	names := make([]string, len(cols))
	params := make([]string, len(cols))
	for i, c := range cols {
		names[i] = c.name
		params[i] = fmt.Sprintf("$%d::%s[]", i+1, c.typ)
	}
	key := strings.Join(names, ", ")
	n := len(cols)
	batch.Queue(`INSERT INTO `+table+` AS h (`+key+`, buckets, counts)
		SELECT `+key+`, array_agg(b ORDER BY b), array_agg(n::integer ORDER BY b)
		FROM unnest(`+strings.Join(params, ", ")+fmt.Sprintf(", $%d::smallint[], $%d::bigint[]", n+1, n+2)+`) AS x(`+key+`, b, n)
		GROUP BY `+key+`
		ON CONFLICT (`+key+`) DO UPDATE SET (buckets, counts) =
			(SELECT * FROM histogram_add(h.buckets, h.counts, EXCLUDED.buckets, EXCLUDED.counts))`,
		append(slices.Clip(keys), buckets, counts)...)
}
