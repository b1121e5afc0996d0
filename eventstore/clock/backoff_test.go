package clock

import (
	"math"
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	const initial, maxWait = time.Second, 10 * time.Second
	for _, tc := range []struct {
		name       string
		n          int
		jitter     float64
		retryAfter time.Duration
		want       time.Duration
	}{
		{"first failure, no jitter", 1, 0, 0, time.Second},
		{"second doubles", 2, 0, 0, 2 * time.Second},
		{"fourth", 4, 0, 0, 8 * time.Second},
		{"capped at the maximum", 5, 0, 0, 10 * time.Second},
		{"far past the cap", 500, 0, 0, 10 * time.Second},
		{"jitter takes up to half off", 3, 0.5, 0, 3 * time.Second},
		{"jitter at its largest", 3, 0.999999, 0, 2*time.Second + 2*time.Microsecond},
		{"Retry-After above the backoff", 1, 0, 30 * time.Second, 30 * time.Second},
		{"Retry-After below the backoff", 4, 0, 2 * time.Second, 8 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Backoff(initial, maxWait, tc.n, tc.jitter, tc.retryAfter); got != tc.want {
				t.Errorf("Backoff(%d, %v, %s) = %s, want %s", tc.n, tc.jitter, tc.retryAfter, got, tc.want)
			}
		})
	}
	// A cap near the largest duration doubles up to it, never past it.
	if got := Backoff(time.Second, math.MaxInt64, 100, 0, 0); got != math.MaxInt64 {
		t.Errorf("Backoff with the largest cap after 100 failures = %s, want the cap", got)
	}
}
