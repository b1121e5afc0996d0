package projections

import (
	"context"
	"testing"

	"github.com/reviewledger/reviewledger/projections/internal/workload"
)

func TestCatchUpThenRebuildEqual(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	st := e.workload(t, workload.Config{Reviews: 300, Writers: 3, Seed: 1})
	r := e.runner(t, nil)
	if err := r.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	incremental := dump(t, e.pool)
	if _, err := r.Rebuild(ctx); err != nil {
		t.Fatal(err)
	}
	diff(t, "rebuild", dump(t, e.pool), incremental)
	if n := count(t, e.pool, `SELECT count(*) FROM review_summary`); n != st.Reviews {
		t.Errorf("review_summary has %d rows, want %d", n, st.Reviews)
	}
	t.Logf("stats %+v, rows %d", st, len(incremental["review_summary"]))
}
