package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
	"github.com/reviewledger/reviewledger/projections"
)

// Conflicting completions are ledger events the SLO read model counts,
// rebuilt or not, while the review's own stream does not move.
func TestConflictsReachTheSLO(t *testing.T) {
	t.Parallel()
	h := newPGHarness(t, []step{finding("slo-1", domain.DecisionAccepted)})
	ctx := context.Background()
	h.run(t, "slo-1", "c")
	version := h.load(t, "slo-1").Version()
	hdr, body := h.signedCallback("slo-1", 1, "rejected", "slo-w1")
	if err := h.HandleCallback(ctx, "slo-1", hdr, body); !errors.Is(err, ErrConflictingCompletion) {
		t.Fatalf("callback after the decision = %v", err)
	}
	if v := h.load(t, "slo-1").Version(); v != version {
		t.Fatalf("the conflict moved the review from %d to %d", version, v)
	}
	proj, err := projections.NewRunner(projections.Config{Pool: h.pool, Store: h.ledger.Store(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	db := projections.NewDB(h.pool)
	// The store's global order shows an event once every older
	// transaction on the server ended; other tests' may still run.
	check := func(what string) {
		t.Helper()
		clocktest.EventuallyShows(t, what+": 1 conflicting completion of 1 review", func() (bool, string) {
			if err := proj.CatchUp(ctx); err != nil {
				t.Fatal(err)
			}
			s, err := db.SLO(ctx, time.Hour, "c", h.clock.Now())
			if err != nil {
				t.Fatal(err)
			}
			return s.ConflictingCompletions == 1 && s.Total == 1, fmt.Sprintf("%d conflicting completions of %d reviews", s.ConflictingCompletions, s.Total)
		})
	}
	check("incremental")
	if _, err := proj.Rebuild(ctx); err != nil {
		t.Fatal(err)
	}
	check("rebuilt")
}
