package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/reviewledger/reviewledger/api/audit"
	"github.com/reviewledger/reviewledger/api/httpapi"
	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

// AuditSigningConfig is serve's audit signing, embedded in the serve
// command. With a key, serve signs checkpoints of the ledger every
// interval (in the projector role) and on demand (POST
// /v1/audit/checkpoints); auditors check them with `audit verify
// --public-key`. With a witness directory, every checkpoint is also
// written there, outside the database, for `audit verify --witness`.
// docs/operations.md ("Audit", "Backup and restore") describes the key
// files and the witness.
type AuditSigningConfig struct {
	KeyFile    string        `name:"audit-signing-key" env:"REVIEWLEDGER_AUDIT_SIGNING_KEY" help:"Ed25519 signing key file (PEM, PKCS #8; reviewledger audit keygen writes one): serve signs audit checkpoints with it. None are signed when unset."`
	Interval   time.Duration `name:"audit-checkpoint-interval" env:"REVIEWLEDGER_AUDIT_CHECKPOINT_INTERVAL" default:"1m" help:"How often serve signs an audit checkpoint of the reviews that grew."`
	WitnessDir string        `name:"audit-witness-dir" env:"REVIEWLEDGER_AUDIT_WITNESS_DIR" help:"A directory outside the database where serve also writes every signed audit checkpoint, one file each, never overwritten (needs REVIEWLEDGER_AUDIT_SIGNING_KEY); ship it elsewhere, and check a restored database against it with audit verify --witness."`
}

// Validate reads the key, so that a bad file stops serve before anything
// starts; the error names the setting and the file.
func (c AuditSigningConfig) Validate() error {
	if c.Interval <= 0 {
		return fmt.Errorf("REVIEWLEDGER_AUDIT_CHECKPOINT_INTERVAL: must be a positive duration such as 1m, got %s", c.Interval)
	}
	if _, err := c.loadKey(); err != nil {
		return err
	}
	_, err := c.openWitness()
	return err
}

// openWitness opens the witness directory; nil when none is set. Only
// signed checkpoints are witnessed, so it needs a signing key.
func (c AuditSigningConfig) openWitness() (audit.CheckpointArchive, error) {
	if c.WitnessDir == "" {
		return nil, nil
	}
	if c.KeyFile == "" {
		return nil, errors.New("REVIEWLEDGER_AUDIT_WITNESS_DIR: needs REVIEWLEDGER_AUDIT_SIGNING_KEY (only signed checkpoints are witnessed)")
	}
	a, err := audit.OpenDirArchive(c.WitnessDir)
	if err != nil {
		return nil, fmt.Errorf("REVIEWLEDGER_AUDIT_WITNESS_DIR: must be a writable directory: %w", err)
	}
	return a, nil
}

// loadKey reads the signing key; nil when none is set.
func (c AuditSigningConfig) loadKey() (ed25519.PrivateKey, error) {
	if c.KeyFile == "" {
		return nil, nil
	}
	k, err := audit.LoadPrivateKey(c.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("REVIEWLEDGER_AUDIT_SIGNING_KEY: %w", err)
	}
	return k, nil
}

// auditSigning is serve's signer, or nothing when no key is set.
type auditSigning struct {
	signer *audit.Signer
}

// open returns the signing of a serve process.
func (c AuditSigningConfig) open(dbs pools, store eventstore.Store, led *ledger.Ledger, reg prometheus.Registerer, log *slog.Logger) (auditSigning, error) {
	key, err := c.loadKey()
	if err != nil || key == nil {
		return auditSigning{}, err
	}
	witness, err := c.openWitness()
	if err != nil {
		return auditSigning{}, err
	}
	s, err := audit.NewSigner(audit.SignerConfig{Key: key, Store: store, Histories: led, Checkpoints: audit.PGCheckpoints{Pool: dbs.Main, Sessions: dbs.Sessions},
		Archive: witness, Interval: c.Interval, Logger: log, Registerer: reg})
	if err != nil {
		return auditSigning{}, err
	}
	log.Info("audit checkpoints signed", "key_id", s.KeyID(), "interval", c.Interval, "witness", c.WitnessDir)
	return auditSigning{signer: s}, nil
}

// checkpoints is httpapi.Deps.Checkpoints: nil without a key, so that the
// route answers 503.
func (a auditSigning) checkpoints() httpapi.Checkpoints {
	if a.signer == nil {
		return nil
	}
	return a.signer
}

// role is the periodic signer, run where the projections run; none
// without a key.
func (a auditSigning) roles() []role {
	if a.signer == nil {
		return nil
	}
	return []role{{"audit signer", func(ctx context.Context) error { return a.signer.Run(ctx) }}}
}
