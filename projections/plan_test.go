package projections

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/reviewledger/reviewledger/projections/internal/workload"
)

// committed is what one transaction of a runner committed: the
// projections it moved and its plan_cache_mode.
type committed struct {
	names []string
	mode  string
}

// recordCommits makes r record every transaction it commits.
func recordCommits(r *Runner) func() []committed {
	var (
		mu  sync.Mutex
		out []committed
	)
	r.beforeCommit = func(ctx context.Context, tx pgx.Tx, names []string) error {
		var mode string
		if err := tx.QueryRow(ctx, `SELECT current_setting('plan_cache_mode')`).Scan(&mode); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		out = append(out, committed{names: slices.Clone(names), mode: mode})
		return nil
	}
	return func() []committed {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(out)
	}
}

// caughtUpEqualsRebuild checks that the read models r caught up hold
// what a rebuild of them makes of the same ledger.
func caughtUpEqualsRebuild(t *testing.T, e *env, r *Runner) {
	t.Helper()
	caughtUp := dump(t, e.pool)
	r.beforeCommit = nil
	if _, err := r.Rebuild(context.Background()); err != nil {
		t.Fatal(err)
	}
	diff(t, "rebuild vs catch-up", dump(t, e.pool), caughtUp)
}

// TestCatchUpBatchesArePlannedForTheirArguments: a full batch of
// customPlansFrom events or more is applied to each projection in a
// transaction of its own, planned for its arguments (plan_cache_mode
// force_custom_plan); a smaller one to every projection in one
// transaction with the server's setting; and the read models come out
// the same as a rebuild's (which plans every batch for its arguments).
func TestCatchUpBatchesArePlannedForTheirArguments(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	st := e.workload(t, workload.Config{Reviews: 250, Writers: 4, Seed: 31})
	r := e.runner(t, func(c *Config) { c.BatchSize = customPlansFrom })
	commits := recordCommits(r)
	if err := r.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	full := int(st.Events / customPlansFrom)
	if full < 2 || st.Events%customPlansFrom == 0 {
		t.Fatalf("the workload's %d events make %d full batches of %d and no smaller last one: the test needs both", st.Events, full, customPlansFrom)
	}
	got := commits()
	last := got[len(got)-1]
	if last.mode != "auto" || len(last.names) != len(all()) {
		t.Errorf("the last, smaller batch: %+v, want every projection in one transaction, plan_cache_mode auto", last)
	}
	apart := got[:len(got)-1]
	moved := make(map[string]int)
	for _, c := range apart {
		if c.mode != "force_custom_plan" || len(c.names) != 1 {
			t.Fatalf("a full batch's transaction: %+v, want one projection, plan_cache_mode force_custom_plan (every one: %+v)", c, got)
		}
		moved[c.names[0]]++
	}
	for _, p := range all() {
		if moved[p.name()] == 0 || moved[p.name()] > full {
			t.Errorf("projection %s moved by %d of the %d full batches' transactions, want at least one and at most one a batch", p.name(), moved[p.name()], full)
		}
	}
	checkCounts(t, e, st)
	caughtUpEqualsRebuild(t, e, r)
}

// TestAFailedProjectionLeavesTheOthersCommitted: when one projection's
// transaction of a full batch fails, the others commit; the batch is then
// tried by each alone, which finds nothing left for them and applies it
// to the one that failed, and the read models come out the same as a
// rebuild's.
func TestAFailedProjectionLeavesTheOthersCommitted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	st := e.workload(t, workload.Config{Reviews: 250, Writers: 4, Seed: 41})
	r := e.runner(t, func(c *Config) { c.BatchSize = customPlansFrom })
	var (
		mu        sync.Mutex
		failed    bool
		committed []string // the projections committed before the failed one's retry
		retried   bool
	)
	errOnce := errors.New("summary's first transaction refused")
	r.beforeCommit = func(_ context.Context, _ pgx.Tx, names []string) error {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case !failed && slices.Equal(names, []string{ReviewSummary}):
			failed = true
			return errOnce
		case failed && !retried && slices.Equal(names, []string{ReviewSummary}):
			retried = true
		case !retried:
			committed = append(committed, names...)
		}
		return nil
	}
	if err := r.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	if !failed || !retried {
		t.Fatalf("failed %v, retried %v: the summary's first transaction should fail and be retried", failed, retried)
	}
	checkCounts(t, e, st)
	caughtUpEqualsRebuild(t, e, r)
	slices.Sort(committed)
	if want := []string{ManualQueue, Providers, SLO}; !slices.Equal(committed, want) {
		t.Errorf("committed before the summary's retry: %v, want the others' transactions of that batch, once each (%v)", committed, want)
	}
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

// TestABatchShortOfFullIsAppliedTogether: a batch of customPlansFrom
// events or more that is not a full read (a serving runner at the head
// under heavy load) is planned for its arguments but applied to every
// projection in one transaction, as a serving runner's batches always
// were.
func TestABatchShortOfFullIsAppliedTogether(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	st := e.workload(t, workload.Config{Reviews: 250, Writers: 4, Seed: 31})
	r := e.runner(t, func(c *Config) { c.BatchSize = 4 * int(st.Events) })
	commits := recordCommits(r)
	if err := r.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	got := commits()
	if st.Events < customPlansFrom || len(got) != 1 || len(got[0].names) != len(all()) || got[0].mode != "force_custom_plan" {
		t.Fatalf("one batch of %d events, a quarter of BatchSize: %+v, want one transaction for every projection, planned for its arguments", st.Events, got)
	}
	checkCounts(t, e, st)
}
