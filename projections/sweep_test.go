package projections

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/projections/internal/workload"
)

// TestSweeperExpiresClaimsAndCountsBreachesOnce: two sweepers (two
// processes) over one database record an expired claim once as released
// by the system, and count each SLA breach once between them.
func TestSweeperExpiresClaimsAndCountsBreachesOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	s := scenario{t: t, e: e, pol: workload.DefaultPolicy()}
	sec := func(n float64) time.Time { return t0.Add(time.Duration(n * float64(time.Second))) }
	for _, id := range []string{"a", "b"} {
		rv := s.submit(id, "transcript_import", sec(0)) // manual_sla 2m
		rv = s.attempt(rv, sec(0))
		rv = s.timeout(rv, domain.ClassProviderUnavailable, sec(1))
		s.add(rv)(one(rv.Escalate(domain.ReasonBudgetExhausted, "", sec(10)))) // due at 130 s
	}
	a := s.load("a")
	s.add(a)(one(a.Claim("ada", time.Minute, sec(20))))
	r := e.runner(t, nil)
	catchUp(t, r)

	now := sec(200) // a's claim expired at 80 s; both are past due
	sweepers := make([]*Sweeper, 2)
	for i := range sweepers {
		sw, err := NewSweeper(SweepConfig{DB: e.db, Reviews: e.ledger, Registerer: prometheus.NewRegistry(), Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		sweepers[i] = sw
	}
	// A review that moved between a sweeper's load and its write is left
	// to the next sweep: no error, nothing counted.
	moved := &movedMeanwhile{Ledger: e.ledger}
	raced, err := NewSweeper(SweepConfig{DB: e.db, Reviews: moved, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if err := raced.expire(ctx, "a", now); err != nil || counter(t, raced.expired) != 0 || moved.events != 1 {
		t.Fatalf("a claim expired on a review that moved meanwhile: %v, %v counted, %d events written; want nil, none, the release refused",
			err, counter(t, raced.expired), moved.events)
	}
	for _, sw := range sweepers {
		if err := sw.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var breaches, expired float64
	for _, sw := range sweepers {
		breaches += counter(t, sw.breaches.WithLabelValues("transcript_import"))
		expired += counter(t, sw.expired)
	}
	// The second sweeper read the claim from a projection that had not
	// seen the release: it loaded the review, found no claim, appended
	// nothing.
	if breaches != 2 || expired != 1 {
		t.Fatalf("breaches %v, expired claims %v; want 2 and 1", breaches, expired)
	}
	h, err := e.ledger.History(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	last := h.Events[len(h.Events)-1]
	rel, ok := last.Event.(domain.ClaimReleased)
	if !ok || rel.Reason != domain.ReleaseExpired || rel.By != domain.SystemActor || rel.Moderator != "ada" || last.Metadata.Actor != domain.SystemActor {
		t.Fatalf("last event %+v by %s", last.Event, last.Metadata.Actor)
	}
	catchUp(t, r)
	if ids, _ := e.db.ExpiredClaims(ctx, now, 10); len(ids) != 0 {
		t.Fatalf("still expired: %v", ids)
	}
	// Sweeping again, or after a rebuild, counts nothing more.
	if _, err := r.Rebuild(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sweepers[0].Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if n := counter(t, sweepers[0].breaches.WithLabelValues("transcript_import")) + counter(t, sweepers[1].breaches.WithLabelValues("transcript_import")); n != 2 {
		t.Fatalf("breaches after a rebuild: %v", n)
	}
}

// movedMeanwhile is a ledger on which every review moved between its load
// and the write made at the version loaded; it counts the events it was
// asked to write.
type movedMeanwhile struct {
	*ledger.Ledger
	events int
}

func (m *movedMeanwhile) Write(_ context.Context, _ *ledger.Snapshot, _ ledger.Actor, s ledger.Step) (*ledger.Snapshot, error) {
	m.events += len(s.Events)
	return nil, fmt.Errorf("append: %w", eventstore.ErrWrongExpectedVersion)
}
