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

func TestVerdictUnder(t *testing.T) {
	for _, tc := range []struct {
		value, bound float64
		want         string
	}{
		{49.9, 50, "ok"},
		{50, 50, "BELOW TARGET (target < 50)"},
		{1300, 1200, "BELOW TARGET (target < 1200)"},
		{0, 100, "ok"},
	} {
		if got := VerdictUnder(tc.value, tc.bound); got != tc.want {
			t.Errorf("VerdictUnder(%v, %v) = %q, want %q", tc.value, tc.bound, got, tc.want)
		}
	}
}
