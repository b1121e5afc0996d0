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
	// The distribution: the two failures took 2 s and 1 s, the timeout 10 s.
	var fails, timeouts int64
	for _, b := range got[0].Buckets {
		fails, timeouts = fails+b.Failures, timeouts+b.Timeouts
		if b.ToMS == nil || b.FromMS >= *b.ToMS {
			t.Errorf("bucket %+v has no bounds", b)
		}
		if b.Timeouts == 1 && !(b.FromMS < 10000 && *b.ToMS >= 10000) {
			t.Errorf("the 10 s timeout is in (%v, %v] ms", b.FromMS, *b.ToMS)
		}
	}
	if fails != 2 || timeouts != 1 || len(got[0].Buckets) != 3 {
		t.Errorf("buckets %+v, want 3 holding 2 failures and 1 timeout", got[0].Buckets)
	}
}
