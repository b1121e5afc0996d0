package projections

import (
	"context"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/projections/internal/workload"
)

// Every classification but deadline_exceeded is an attempt failure:
// store_unavailable (the ledger could not be written) and one this code
// does not know yet (a newer writer's) alike. The batch goes through and
// each attempt counts.
func TestAttemptClassificationsCountAsFailures(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	s := scenario{t: t, e: e, pol: workload.DefaultPolicy()}
	rv := s.submit("a", "caption_suggestion", t0)
	rv = s.attempt(rv, t0)
	rv = s.timeout(rv, domain.ClassStoreUnavailable, t0.Add(2*time.Second))
	rv = s.attempt(rv, t0.Add(3*time.Second))
	rv = s.timeout(rv, domain.Classification("a_classification_from_the_future"), t0.Add(4*time.Second))
	rv = s.attempt(rv, t0.Add(5*time.Second))
	s.timeout(rv, domain.ClassDeadlineExceeded, t0.Add(15*time.Second))
	if err := e.runner(t, nil).CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := e.db.AttemptServiceTimes(ctx, "", time.Hour, t0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Attempts != 3 || got[0].Failures != 2 || got[0].Timeouts != 1 {
		t.Fatalf("service times: %+v, want 3 attempts: 2 failures, 1 timeout", got)
	}
}
