package benchtarget

import (
	"testing"
	"time"
)

func TestQuantileIsTheNearestRank(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- { // out of order: Quantile sorts a copy
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 50 * time.Millisecond}, {0.99, 99 * time.Millisecond}, {1, 100 * time.Millisecond}, {0, time.Millisecond}} {
		if got := Quantile(ds, c.q); got != c.want {
			t.Errorf("Quantile(1..100 ms, %v) = %v, want %v", c.q, got, c.want)
		}
	}
	if ds[0] != 100*time.Millisecond {
		t.Error("Quantile sorted its argument in place")
	}
	if got := Quantile([]time.Duration{3, 1, 2}, 0.5); got != 2 {
		t.Errorf("Quantile of three, 0.5 = %v, want the middle one", got)
	}
	if got := Quantile(nil, 0.99); got != 0 {
		t.Errorf("Quantile of none = %v, want 0", got)
	}
}
