package projections

import (
	"context"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reviewledger/reviewledger/projections/internal/workload"
)

// TestHistogramAdd: histogram_add sums two histograms bucket by bucket,
// either of them empty, into buckets ascending, each once.
func TestHistogramAdd(t *testing.T) {
	t.Parallel()
	pool := newEnv(t).pool
	for _, tc := range []struct {
		b1, n1, b2, n2  []int
		buckets, counts []int
	}{
		{[]int{1, 5}, []int{2, 3}, []int{0, 5, 9}, []int{1, 1, 4}, []int{0, 1, 5, 9}, []int{1, 2, 4, 4}},
		{[]int{}, []int{}, []int{7, 3}, []int{1, 2}, []int{3, 7}, []int{2, 1}},
		{[]int{89}, []int{2147483000}, []int{}, []int{}, []int{89}, []int{2147483000}},
		{[]int{}, []int{}, []int{}, []int{}, []int{}, []int{}},
	} {
		var buckets, counts []int
		if err := pool.QueryRow(context.Background(), `SELECT * FROM histogram_add($1::smallint[], $2::integer[], $3::smallint[], $4::integer[])`,
			tc.b1, tc.n1, tc.b2, tc.n2).Scan(&buckets, &counts); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(buckets, tc.buckets) || !slices.Equal(counts, tc.counts) {
			t.Errorf("histogram_add(%v %v, %v %v) = %v %v, want %v %v", tc.b1, tc.n1, tc.b2, tc.n2, buckets, counts, tc.buckets, tc.counts)
		}
	}
}

// TestHistogramRowsAreCanonical: after a workload applied in batches of 53
// events, so that most histograms are added to many times, every
// histogram row of every table holds its buckets ascending, each once,
// with a count above zero; and the histograms of a minute table sum to
// those of its hourly rollup.
func TestHistogramRowsAreCanonical(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.workload(t, workload.Config{Reviews: 400, Writers: 3, Seed: 5, Start: t0, Spacing: 9 * time.Second})
	if err := e.runner(t, nil).CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"slo_latency", "slo_attempt", "slo_latency_hour", "slo_attempt_hour", "provider_latency"} {
		rows, _ := e.pool.Query(ctx, `SELECT buckets, counts FROM `+table)
		var buckets, counts []int
		n := 0
		if _, err := pgx.ForEachRow(rows, []any{&buckets, &counts}, func() error {
			n++
			if len(buckets) == 0 || len(buckets) != len(counts) || !slices.IsSorted(buckets) || len(slices.Compact(slices.Clone(buckets))) != len(buckets) || slices.Min(counts) < 1 {
				t.Errorf("%s: a row of buckets %v and counts %v", table, buckets, counts)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Errorf("%s: no rows after the workload", table)
		}
	}
	sums := func(table string) map[int]int64 {
		rows, _ := e.pool.Query(ctx, `SELECT bucket, sum(n)::bigint FROM `+histogramRows(table)+` GROUP BY bucket`)
		got := map[int]int64{}
		var b int
		var n int64
		if _, err := pgx.ForEachRow(rows, []any{&b, &n}, func() error { got[b] = n; return nil }); err != nil {
			t.Fatal(err)
		}
		return got
	}
	for _, pair := range [][2]string{{"slo_latency", "slo_latency_hour"}, {"slo_attempt", "slo_attempt_hour"}} {
		if m, h := sums(pair[0]), sums(pair[1]); len(m) == 0 || !reflect.DeepEqual(m, h) {
			t.Errorf("%s sums to %v per bucket, %s to %v", pair[0], m, pair[1], h)
		}
	}
}
