package projections

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/reviewledger/reviewledger/projections/internal/workload"
)

// TestCatchUpBatchesArePlannedForTheirArguments: a batch of
// customPlansFrom events or more runs with plan_cache_mode
// force_custom_plan, a smaller one with the server's setting, and the
// read models come out the same as a rebuild's (which plans every batch
// for its arguments).
func TestCatchUpBatchesArePlannedForTheirArguments(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	st := e.workload(t, workload.Config{Reviews: 250, Writers: 4, Seed: 31})
	r := e.runner(t, func(c *Config) { c.BatchSize = customPlansFrom })
	var (
		mu    sync.Mutex
		modes []string
	)
	r.beforeCommit = func(ctx context.Context, tx pgx.Tx, _ []string) error {
		var mode string
		if err := tx.QueryRow(ctx, `SELECT current_setting('plan_cache_mode')`).Scan(&mode); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		modes = append(modes, mode)
		return nil
	}
	if err := r.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	var want []string
	for left := st.Events; left > 0; left -= customPlansFrom {
		if left >= customPlansFrom {
			want = append(want, "force_custom_plan")
		} else {
			want = append(want, "auto")
		}
	}
	if len(want) < 2 || want[len(want)-1] != "auto" {
		t.Fatalf("the workload's %d events make batches %q: the test needs full batches and a smaller last one", st.Events, want)
	}
	if !slices.Equal(modes, want) {
		t.Fatalf("plan_cache_mode of the catch-up's batches (%d events, %d a batch): %q, want %q", st.Events, customPlansFrom, modes, want)
	}
	checkCounts(t, e, st)
	caughtUp := dump(t, e.pool)
	r.beforeCommit = nil
	if _, err := r.Rebuild(ctx); err != nil {
		t.Fatal(err)
	}
	diff(t, "rebuild vs catch-up", dump(t, e.pool), caughtUp)
}

// TestRebuildPlansForTheArguments: every transaction of a rebuild's
// builders sets plan_cache_mode force_custom_plan before its writes.
func TestRebuildPlansForTheArguments(t *testing.T) {
	t.Parallel()
	e, sql := newTracedEnv(t)
	ctx := context.Background()
	e.workload(t, workload.Config{Reviews: 120, Seed: 37})
	r := e.runner(t, nil) // 53 events a batch
	sql.take()
	if _, err := r.Rebuild(ctx); err != nil {
		t.Fatal(err)
	}
	var sets, begins int
	for _, q := range sql.take() {
		switch q {
		case `SET LOCAL plan_cache_mode = force_custom_plan`:
			sets++
		case `SET LOCAL synchronous_commit = off`: // a builder's transaction starts
			begins++
		}
	}
	if begins == 0 || sets != begins {
		t.Fatalf("a rebuild's builders planned %d of their %d transactions for the arguments, want all", sets, begins)
	}
}
