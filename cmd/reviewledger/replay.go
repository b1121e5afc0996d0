package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/reviewledger/reviewledger/api/audit"
	"github.com/reviewledger/reviewledger/domain"
)

// ReplayCmd prints a review's timeline and the state rebuilt from it, then
// the conflicting completions recorded in its conflict stream.
type ReplayCmd struct {
	Config `embed:""`
	Store  StoreConfig `embed:""`
	ID     string      `arg:"" name:"id" help:"The review to replay."`
	AsOf   string      `name:"as-of" help:"Replay only the events up to this time (RFC 3339, e.g. 2026-11-30T12:00:00Z)."`

	asOf time.Time
}

// Validate checks the review ID and --as-of.
func (c *ReplayCmd) Validate() error {
	if err := domain.ValidateReviewID(c.ID); err != nil {
		return fmt.Errorf("review ID: %w", err)
	}
	if c.AsOf != "" {
		t, err := time.Parse(time.RFC3339Nano, c.AsOf)
		if err != nil {
			return fmt.Errorf("--as-of: must be an RFC 3339 time such as 2026-11-30T12:00:00Z, got %q", c.AsOf)
		}
		c.asOf = t
	}
	return nil
}

// Run reads the review's stream and renders it. It only reads.
func (c *ReplayCmd) Run(ctx context.Context, log *slog.Logger, out io.Writer) error {
	db, err := openLedger(ctx, &c.Config, c.Store, log)
	if err != nil {
		return err
	}
	defer db.Close()
	led := db.Ledger
	h, err := led.History(ctx, c.ID)
	if err != nil {
		return err
	}
	r, err := audit.NewReplay(h, c.asOf)
	if err != nil {
		return err
	}
	conflicts, err := led.Conflicts(ctx, c.ID)
	if err != nil {
		return err
	}
	r.AddConflicts(conflicts)
	shadows, err := led.Shadows(ctx, c.ID)
	if err != nil {
		return err
	}
	r.AddShadows(shadows)
	return r.Render(out)
}
