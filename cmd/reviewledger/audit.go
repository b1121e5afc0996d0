package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/reviewledger/reviewledger/api/audit"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

// AuditCmd groups the auditor's commands.
type AuditCmd struct {
	Verify AuditVerifyCmd `cmd:"" help:"Verify every review's history (or one) and exit non-zero naming each damaged review."`
	Keygen AuditKeygenCmd `cmd:"" help:"Generate an Ed25519 audit key: the signing key for serve (REVIEWLEDGER_AUDIT_SIGNING_KEY) and its public key for audit verify --public-key."`
}

// AuditVerifyCmd checks hash chains, audit anchors, review_summary and,
// with public keys, the signed checkpoints.
type AuditVerifyCmd struct {
	Config     `embed:""`
	Store      StoreConfig `embed:""`
	Review     string      `name:"review" help:"Verify only this review."`
	NoAnchor   bool        `name:"no-anchor" help:"Check the audit anchors but do not advance them."`
	PublicKeys []string    `name:"public-key" type:"existingfile" help:"Check the signed checkpoints with this public key file (PEM, PKIX Ed25519); repeat for every key that ever signed."`
	Witness    string      `name:"witness" type:"existingdir" help:"A copy of serve's witness directory (REVIEWLEDGER_AUDIT_WITNESS_DIR): check its checkpoints with --public-key, and that the database still holds every checkpoint and review head they signed (a restore to an earlier point, a removed review, a truncated stream)."`

	keys []ed25519.PublicKey
}

// Validate reads the public keys; the error names the file.
func (c *AuditVerifyCmd) Validate() error {
	c.keys = nil
	for _, path := range c.PublicKeys {
		k, err := audit.LoadPublicKey(path)
		if err != nil {
			return fmt.Errorf("--public-key: %w", err)
		}
		c.keys = append(c.keys, k)
	}
	if c.Witness != "" && len(c.keys) == 0 {
		return errors.New("--witness: needs --public-key (the witness's checkpoints are checked with it)")
	}
	return nil
}

// Run verifies, prints each damaged review and broken checkpoint and a
// summary, and fails when anything is damaged.
func (c *AuditVerifyCmd) Run(ctx context.Context, log *slog.Logger, out io.Writer) error {
	db, err := openLedger(ctx, &c.Config, c.Store, log)
	if err != nil {
		return err
	}
	defer db.Close()
	v, closeRead, err := c.verifier(ctx, db, log)
	if err != nil {
		return err
	}
	defer closeRead()
	rep, err := v.Verify(ctx, c.Review)
	if err != nil {
		return err
	}
	for _, d := range rep.Damaged {
		fmt.Fprintf(out, "DAMAGED %s\n", d)
	}
	for _, b := range rep.Broken {
		fmt.Fprintf(out, "DAMAGED %s\n", b)
	}
	n := len(audit.DamagedIDs(rep.Damaged))
	status := "intact"
	if n > 0 {
		status = fmt.Sprintf("%d DAMAGED", n)
	}
	fmt.Fprintf(out, "audit verify: %d reviews, %d events checked: %s; %d anchors advanced\n",
		rep.Reviews, rep.Events, status, rep.Anchored)
	if len(c.keys) > 0 {
		latest := "none"
		if l := rep.Latest; l != nil {
			latest = fmt.Sprintf("#%d signed %s by key %s", l.Seq, l.SignedAt.UTC().Format(time.RFC3339), l.KeyID)
		}
		fmt.Fprintf(out, "signed checkpoints: %d verified, %d broken; latest %s; %d events not yet signed\n",
			rep.Checkpoints, len(rep.Broken), latest, rep.Unsigned)
	}
	if c.Witness != "" {
		fmt.Fprintf(out, "witness %s: %d checkpoints verified, %d not in the database%s; %d in the database not in the witness\n",
			c.Witness, rep.Archived, len(rep.Lost), seqList(rep.Lost), rep.Unwitnessed)
	}
	if n > 0 || len(rep.Broken) > 0 {
		// Each damage is on its own line above; the error stays one line.
		return fmt.Errorf("%d of %d reviews damaged, %d signed checkpoints broken (each named above): %w", n, rep.Reviews, len(rep.Broken), audit.ErrDamaged)
	}
	return nil
}

// verifier reads the primary, or, with REVIEWLEDGER_READ_DATABASE_URL,
// the replica (the ledger when it is in PostgreSQL, the summaries, anchors
// and checkpoints), advancing anchors on the primary. A replica that
// does not answer as a standby is passed over with a warning.
func (c *AuditVerifyCmd) verifier(ctx context.Context, db *ledgerDB, log *slog.Logger) (*audit.Verifier, func(), error) {
	read, store, hist := db.Pool, db.Store, db.Ledger
	anchors := audit.Anchors(audit.PGAnchors{Pool: db.Pool})
	closeRead := func() {}
	if c.ReadURL != "" {
		rpool, err := openReadPool(ctx, c.ReadURL, 8)
		if err != nil {
			return nil, nil, err
		}
		var standby bool
		err = rpool.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&standby)
		switch {
		case err != nil || !standby:
			rpool.Close()
			log.Warn("REVIEWLEDGER_READ_DATABASE_URL does not answer as a standby; verifying on the primary", "error", fmt.Sprint(err))
		default:
			rstore, closeStore, err := c.Store.open(ctx, pools{Main: rpool, Sessions: rpool}, nil, log)
			if err != nil {
				rpool.Close()
				return nil, nil, err
			}
			read, store, hist = rpool, rstore, ledger.New(rstore)
			anchors = audit.ReplicaAnchors{Replica: audit.PGAnchors{Pool: rpool}, Primary: audit.PGAnchors{Pool: db.Pool}}
			closeRead = func() { closeStore(); rpool.Close() }
		}
	}
	v := &audit.Verifier{Store: store, Histories: hist, Witnesses: []audit.Witness{audit.PGSummaries{Pool: read}, anchors},
		PublicKeys: c.keys, Checkpoints: audit.PGCheckpoints{Pool: read}}
	if !c.NoAnchor {
		v.Anchors = anchors
	}
	if c.Witness != "" {
		v.Archive = audit.DirArchive{Dir: c.Witness}
	}
	return v, closeRead, nil
}

// seqList is " (#2, #3)" for seqs 2 and 3, "" for none.
func seqList(seqs []int64) string {
	if len(seqs) == 0 {
		return ""
	}
	parts := make([]string, len(seqs))
	for i, s := range seqs {
		parts[i] = "#" + strconv.FormatInt(s, 10)
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// AuditKeygenCmd writes a new audit key pair.
type AuditKeygenCmd struct {
	Out string `name:"out" required:"" help:"Where to write the signing key (mode 0600); the public key goes to the same path plus .pub. Existing files are never replaced."`
}

// Run writes the key pair and says where.
func (c *AuditKeygenCmd) Run(out io.Writer) error {
	id, err := audit.WriteKeyPair(c.Out)
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	_, err = fmt.Fprintf(out, "audit key %s\nsigning key (for serve, REVIEWLEDGER_AUDIT_SIGNING_KEY): %s\npublic key (for audit verify --public-key): %s.pub\n", id, c.Out, c.Out)
	return err
}
