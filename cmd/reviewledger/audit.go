package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/reviewledger/reviewledger/api/audit"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

// AuditCmd groups the auditor's commands.
type AuditCmd struct {
	Verify AuditVerifyCmd `cmd:"" help:"Verify every review's history (or one) and exit non-zero naming each damaged review."`
}

// AuditVerifyCmd checks hash chains, audit anchors and review_summary.
type AuditVerifyCmd struct {
	Config   `embed:""`
	Review   string `name:"review" help:"Verify only this review."`
	NoAnchor bool   `name:"no-anchor" help:"Check the audit anchors but do not advance them."`
}

// Run verifies, prints each damaged review and a summary, and fails when
// anything is damaged.
func (c *AuditVerifyCmd) Run(ctx context.Context, log *slog.Logger, out io.Writer) error {
	pool, store, closeDB, err := openLedgerDB(ctx, c.DatabaseURL, log, true)
	if err != nil {
		return err
	}
	defer closeDB()
	anchors := audit.PGAnchors{Pool: pool}
	v := &audit.Verifier{Store: store, Histories: ledger.New(store), Witnesses: []audit.Witness{audit.PGSummaries{Pool: pool}, anchors}}
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
	status := "intact"
	if n := len(audit.DamagedIDs(rep.Damaged)); n > 0 {
		status = fmt.Sprintf("%d DAMAGED", n)
	}
	if _, err := fmt.Fprintf(out, "audit verify: %d reviews, %d events checked: %s; %d anchors advanced\n",
		rep.Reviews, rep.Events, status, rep.Anchored); err != nil {
		return err
	}
	return rep.Err()
}
