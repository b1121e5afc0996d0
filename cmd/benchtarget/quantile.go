package benchtarget

import (
	"slices"
	"time"
)

// Quantile is the q-quantile of ds by nearest rank (the smallest value at
// or above which a share q of ds lies), from a sorted copy; zero when ds
// is empty.
func Quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*q+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}
