package main

import (
	"math"
	"testing"
)

// TestTopStatementsPerReview: statement times are divided by each side's
// reviews, the statements that grew most come first, a statement run on
// one side only counts as nothing on the other, and the totals add every
// statement.
func TestTopStatementsPerReview(t *testing.T) {
	empty := statements{"insert": {calls: 100, ms: 100}, "claim": {calls: 100, ms: 50}, "gone": {calls: 1, ms: 10}}
	full := statements{"insert": {calls: 200, ms: 400}, "claim": {calls: 200, ms: 100}, "new": {calls: 5, ms: 60}}
	rows, et, ft := topStatements(empty, full, 100, 200, 3)
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	want := []statementRow{{"insert", 1, 2}, {"new", 0, 0.3}, {"claim", 0.5, 0.5}}
	if len(rows) != len(want) {
		t.Fatalf("rows %+v, want %+v", rows, want)
	}
	for i, w := range want {
		if rows[i].query != w.query || !near(rows[i].empty, w.empty) || !near(rows[i].full, w.full) {
			t.Errorf("row %d: %+v, want %+v", i, rows[i], w)
		}
	}
	if !near(et, 1.6) || !near(ft, 2.8) {
		t.Errorf("totals %v → %v, want 1.6 → 2.8", et, ft)
	}
}
