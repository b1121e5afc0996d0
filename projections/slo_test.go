package projections

import (
	"context"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/projections/internal/workload"
)

// A classification this code does not know (a newer writer's, such as
// store_unavailable: the ledger could not be written) is an attempt
// failure like any other: the batch goes through and the attempt counts.
func TestUnknownClassificationCountsAsFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	s := scenario{t: t, e: e, pol: workload.DefaultPolicy()}
	rv := s.submit("a", "caption_suggestion", t0)
	rv = s.attempt(rv, t0)
	rv = s.timeout(rv, domain.Classification("store_unavailable"), t0.Add(2*time.Second))
	rv = s.attempt(rv, t0.Add(3*time.Second))
	s.timeout(rv, domain.ClassDeadlineExceeded, t0.Add(13*time.Second))
	if err := e.runner(t, nil).CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := e.db.AttemptServiceTimes(ctx, "", time.Hour, t0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Attempts != 2 || got[0].Failures != 1 || got[0].Timeouts != 1 {
		t.Fatalf("service times: %+v, want 2 attempts: 1 failure, 1 timeout", got)
	}
}
