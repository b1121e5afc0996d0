package benchtarget

import "testing"

func TestVerdict(t *testing.T) {
	for _, tc := range []struct {
		value, least float64
		want         string
	}{
		{0.95, 0.9, "ok"},
		{0.9, 0.9, "ok"},
		{0.89, 0.9, "BELOW TARGET (target 0.9)"},
		{49999, 50000, "BELOW TARGET (target 50000)"},
		{120000, 50000, "ok"},
	} {
		if got := Verdict(tc.value, tc.least); got != tc.want {
			t.Errorf("Verdict(%v, %v) = %q, want %q", tc.value, tc.least, got, tc.want)
		}
	}
}
