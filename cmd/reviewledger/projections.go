package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/reviewledger/reviewledger/api/notify"
	"github.com/reviewledger/reviewledger/eventstore/pglock"
	"github.com/reviewledger/reviewledger/projections"
)

// ProjectionsCmd operates the read models.
type ProjectionsCmd struct {
	Rebuild ProjectionsRebuildCmd `cmd:"" help:"Rebuild read models from the ledger (every one when no name is given) and exit."`
	Status  ProjectionsStatusCmd  `cmd:"" help:"Print each projection's checkpoint and lag."`
}

// ProjectionsRebuildCmd rebuilds projections into fresh tables and swaps
// them in; readers and a running server carry on meanwhile.
type ProjectionsRebuildCmd struct {
	Config `embed:""`
	Store  StoreConfig `embed:""`
	Names  []string    `arg:"" optional:"" name:"name" help:"Projection to rebuild: review_summary, manual_queue or slo."`
}

// Validate refuses unknown projection names.
func (c *ProjectionsRebuildCmd) Validate() error {
	known := projections.Names()
	for _, n := range c.Names {
		if !slices.Contains(known, n) {
			return fmt.Errorf("unknown projection %q (known: %s)", n, strings.Join(known, ", "))
		}
	}
	return nil
}

// Run rebuilds and prints what each rebuild read.
func (c *ProjectionsRebuildCmd) Run(ctx context.Context, log *slog.Logger, out io.Writer) error {
	return withProjections(ctx, &c.Config, c.Store, log, func(r *projections.Runner) error {
		results, err := r.Rebuild(ctx, c.Names...)
		for _, res := range results {
			fmt.Fprintf(out, "rebuilt %s (version %d) from %d events up to %s in %s\n",
				res.Projection, res.Version, res.Events, res.Position, res.Duration.Round(time.Millisecond))
		}
		return err
	})
}

// ProjectionsStatusCmd prints every projection's checkpoint and lag.
type ProjectionsStatusCmd struct {
	Config `embed:""`
	Store  StoreConfig `embed:""`
	MaxLag int64       `name:"max-lag" default:"1000000" help:"Count at most this many events of lag per projection."`
}

// Run prints one line per projection.
func (c *ProjectionsStatusCmd) Run(ctx context.Context, log *slog.Logger, out io.Writer) error {
	if c.MaxLag < 1 {
		return fmt.Errorf("--max-lag: must be at least 1, got %d", c.MaxLag)
	}
	return withProjections(ctx, &c.Config, c.Store, log, func(r *projections.Runner) error {
		status, err := r.Status(ctx, c.MaxLag)
		if err != nil {
			return err
		}
		sweeper, err := r.Holder(ctx, sweeperLockKey)
		if err != nil {
			return err
		}
		notifier, err := r.Holder(ctx, notify.LockKey)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "PROJECTION\tVERSION\tPOSITION\tEVENTS\tLAG EVENTS\tLAG SECONDS\tUPDATED\tREBUILT\tACTIVE")
		for _, s := range status {
			if !s.Exists {
				fmt.Fprintf(tw, "%s\t- (code %d)\t-\t0\t%s\t%.1f\tnever\tnever\t%s\n", s.Projection, s.CodeVersion, lag(s), s.LagSeconds, active(s.Active))
				continue
			}
			version := fmt.Sprint(s.Version)
			if s.Version != s.CodeVersion {
				version += fmt.Sprintf(" (code %d: rebuilds at start)", s.CodeVersion)
			}
			rebuilt := "never"
			if s.RebuiltAt != nil {
				rebuilt = s.RebuiltAt.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%.1f\t%s\t%s\t%s\n", s.Projection, version, s.Position, s.Events,
				lag(s), s.LagSeconds, s.UpdatedAt.UTC().Format(time.RFC3339), rebuilt, active(s.Active))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		_, err = fmt.Fprintf(out, "\nsweeper active: %s\nnotifier active: %s\n", active(sweeper), active(notifier))
		return err
	})
}

// active names the process holding an election's lock, "none" when no
// process does.
func active(h *pglock.Holder) string {
	if h == nil {
		return "none"
	}
	return h.String()
}

func lag(s projections.Status) string {
	if s.LagCapped {
		return fmt.Sprintf(">%d", s.LagEvents)
	}
	return fmt.Sprint(s.LagEvents)
}

// withProjections opens the database and the configured ledger, and runs
// fn with a projection runner over them.
func withProjections(ctx context.Context, cfg *Config, sc StoreConfig, log *slog.Logger, fn func(*projections.Runner) error) error {
	db, err := openLedger(ctx, cfg, sc, log)
	if err != nil {
		return err
	}
	defer db.Close()
	r, err := projections.NewRunner(projections.Config{Pool: db.Pool, Store: db.Store, Logger: log})
	if err != nil {
		return err
	}
	return fn(r)
}
