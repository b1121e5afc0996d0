package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/reviewledger/reviewledger/api/audit"
)

// AuditCmd groups the auditor's commands.
type AuditCmd struct {
	Verify AuditVerifyCmd `cmd:"" help:"Verify every review's history (or one) and exit non-zero naming each damaged review."`
}

// AuditVerifyCmd checks hash chains, audit anchors and review_summary.
type AuditVerifyCmd struct {
	Config   `embed:""`
	Store    StoreConfig `embed:""`
	Review   string      `name:"review" help:"Verify only this review."`
	NoAnchor bool        `name:"no-anchor" help:"Check the audit anchors but do not advance them."`
}

// Run verifies, prints each damaged review and a summary, and fails when
// anything is damaged.
func (c *AuditVerifyCmd) Run(ctx context.Context, log *slog.Logger, out io.Writer) error {
	db, err := openLedger(ctx, &c.Config, c.Store, log)
	if err != nil {
		return err
	}
	defer db.Close()
	anchors := audit.PGAnchors{Pool: db.Pool}
	v := &audit.Verifier{Store: db.Store, Histories: db.Ledger, Witnesses: []audit.Witness{audit.PGSummaries{Pool: db.Pool}, anchors}}
	if !c.NoAnchor {
		v.Anchors = anchors
	}
	rep, err := v.Verify(ctx, c.Review)
	if err != nil {
		return err
	}
	for _, d := range rep.Damaged {
		fmt.Fprintf(out, "DAMAGED %s\n", d)
	}
	n := len(audit.DamagedIDs(rep.Damaged))
	status := "intact"
	if n > 0 {
		status = fmt.Sprintf("%d DAMAGED", n)
	}
	if _, err := fmt.Fprintf(out, "audit verify: %d reviews, %d events checked: %s; %d anchors advanced\n",
		rep.Reviews, rep.Events, status, rep.Anchored); err != nil {
		return err
	}
	if n > 0 {
		// Each damage is on its own line above; the error stays one line.
		return fmt.Errorf("%d of %d reviews damaged (each named above): %w", n, rep.Reviews, audit.ErrDamaged)
	}
	return nil
}
