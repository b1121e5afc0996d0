package projections

import (
	"context"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/migrations/dbtest"
	"github.com/reviewledger/reviewledger/projections/internal/workload"
)

// Conflicting completions are ledger events: read models built from the
// same ledger in a fresh database count them all, equal to the original.
func TestRebuildIntoFreshDatabaseKeepsConflicts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	st := e.workload(t, workload.Config{Reviews: 150, Writers: 3, Seed: 11})
	if st.Conflicts == 0 {
		t.Fatal("the workload made no conflicting completions")
	}
	if err := e.runner(t, nil).CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, e, st)
	want := dump(t, e.pool)

	fresh := &env{pool: dbtest.Pool(t), store: e.store, ledger: e.ledger}
	fresh.db = NewDB(fresh.pool)
	if _, err := fresh.runner(t, nil).Rebuild(ctx); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, fresh, st)
	diff(t, "rebuilt in a fresh database", dump(t, fresh.pool), want)

	// The workload's simulated time starts on 2026-01-01.
	now := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	for _, db := range []*DB{e.db, fresh.db} {
		s, err := db.SLO(ctx, 48*time.Hour, "", now)
		if err != nil {
			t.Fatal(err)
		}
		if s.ConflictingCompletions != st.Conflicts {
			t.Errorf("/v1/slo conflicting_completions %d, want %d", s.ConflictingCompletions, st.Conflicts)
		}
	}
}

// Conflicts counted by the version 1 projection (written straight into
// slo_conflict, not from events) are replaced by those the ledger holds
// when the projection rebuilds itself to version 2.
func TestDirectConflictRowsReplacedByVersionRebuild(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	st := e.workload(t, workload.Config{Reviews: 40, Seed: 5})
	r := e.runner(t, nil)
	if err := r.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	want := dump(t, e.pool)
	if _, err := e.pool.Exec(ctx, `UPDATE projection_checkpoint SET version = 1 WHERE name = 'slo';
		INSERT INTO slo_conflict (content_class, minute, n) VALUES ('caption_suggestion', '2020-01-01T00:00:00Z', 7)`); err != nil {
		t.Fatal(err)
	}
	if err := r.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	diff(t, "after the version rebuild", dump(t, e.pool), want)
	if n := count(t, e.pool, `SELECT coalesce(sum(n), 0) FROM slo_conflict`); n != st.Conflicts {
		t.Errorf("slo_conflict: %d, want %d", n, st.Conflicts)
	}
}
