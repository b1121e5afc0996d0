package runner

import (
	"context"
	"errors"
	"testing"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/projections"
)

var _ ConflictRecorder = (*projections.DB)(nil)

// Conflicting completions reach the SLO read model's table.
func TestConflictsAreRecordedForTheSLO(t *testing.T) {
	t.Parallel()
	var db *projections.DB
	h := newHarness(t, []step{finding("slo-1", domain.DecisionAccepted)}, func(c *Config) {
		db = projections.NewDB(c.Pool)
		c.Conflicts = db
	})
	ctx := context.Background()
	h.run(t, "slo-1", "c")
	hdr, body := h.signedCallback("slo-1", 1, "rejected", "slo-w1")
	if err := h.HandleCallback(ctx, "slo-1", hdr, body); !errors.Is(err, ErrConflictingCompletion) {
		t.Fatalf("callback after the decision = %v", err)
	}
	var n int64
	if err := h.Pool().QueryRow(ctx, `SELECT coalesce(sum(n), 0) FROM slo_conflict WHERE content_class = 'c'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("slo_conflict counts %d, want 1", n)
	}
}
