// Package target judges measured figures against their targets, for the
// benchmarks `make bench` runs: each figure that has a target is printed
// with its verdict beside it, so that a figure under target cannot pass
// unnoticed in a page of numbers. It also computes the latency quantiles
// those figures report, by nearest rank (Quantile).
package benchtarget

import "fmt"

// Below is the verdict of a figure under its target.
const Below = "BELOW TARGET"

// Verdict is what to print beside a figure: "ok" when value reaches least,
// otherwise "BELOW TARGET (target N)".
func Verdict(value, least float64) string {
	if value >= least {
		return "ok"
	}
	return fmt.Sprintf("%s (target %g)", Below, least)
}

// VerdictUnder is Verdict for a figure whose target is a bound it must
// stay under (a latency, a size): "ok" when value is below bound,
// otherwise "BELOW TARGET (target < N)".
func VerdictUnder(value, bound float64) string {
	if value < bound {
		return "ok"
	}
	return fmt.Sprintf("%s (target < %g)", Below, bound)
}
