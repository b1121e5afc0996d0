package audit

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/clock"
	"github.com/reviewledger/reviewledger/eventstore/storeerr"
)

// SignerConfig configures a Signer.
type SignerConfig struct {
	Key         ed25519.PrivateKey
	Store       eventstore.Store // the ledger's global order, read for reviews that grew
	Histories   Histories        // *ledger.Ledger
	Checkpoints PGCheckpoints
	// Archive, when set, receives every checkpoint after it is stored in
	// the database; each round also puts there whatever stored
	// checkpoints it lacks (an earlier put failed, or the archive is
	// new). An archive that fails is logged and counted, never lost: the
	// checkpoints stay in the database until a later round archives them.
	Archive CheckpointArchive
	// Registerer, when set, gets the archive's metrics.
	Registerer prometheus.Registerer
	// Interval is how often Run signs; default 1 minute.
	Interval time.Duration
	// MaxHeads bounds the reviews one checkpoint signs; the next signs the
	// rest. Default 10000.
	MaxHeads int
	Now      func() time.Time // default time.Now
	Logger   *slog.Logger     // default slog.Default()
}

func (c *SignerConfig) setDefaults() {
	if c.Interval <= 0 {
		c.Interval = time.Minute
	}
	if c.MaxHeads <= 0 {
		c.MaxHeads = 10000
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Signer writes signed checkpoints: periodically (Run) and on demand
// (Checkpoint). Several signers on one database take turns under an
// advisory lock, so checkpoints stay one chain.
type Signer struct {
	cfg      SignerConfig
	pub      ed25519.PublicKey
	keyID    string
	archiver *archiver // nil without an Archive
}

// NewSigner returns a signer.
func NewSigner(cfg SignerConfig) (*Signer, error) {
	cfg.setDefaults()
	if len(cfg.Key) != ed25519.PrivateKeySize || cfg.Store == nil || cfg.Histories == nil || cfg.Checkpoints.Pool == nil {
		return nil, errors.New("audit signer: Key, Store, Histories and Checkpoints are required")
	}
	pub, _ := cfg.Key.Public().(ed25519.PublicKey)
	s := &Signer{cfg: cfg, pub: pub, keyID: KeyID(pub)}
	if cfg.Archive != nil {
		a, err := newArchiver(cfg.Archive, cfg.Checkpoints, cfg.Registerer, cfg.Logger)
		if err != nil {
			return nil, err
		}
		s.archiver = a
	}
	return s, nil
}

// KeyID is the ID of the signing key.
func (s *Signer) KeyID() string { return s.keyID }

// Signed is the outcome of a signing round.
type Signed struct {
	Checkpoint Checkpoint
	Signature  []byte // Checkpoint's, over its Body
	// New is false when no review grew since the latest checkpoint, which
	// Checkpoint then is (zero when there is none).
	New bool
	// Refused names the reviews that grew but were not signed because
	// their history no longer holds (its chain is broken, or it no longer
	// extends what an earlier checkpoint signed): `audit verify` reports
	// them.
	Refused []string
}

// Run signs every Interval until ctx is done. A failed round is logged (a
// warning when the database was unavailable, an error otherwise) and tried
// again at the next one.
func (s *Signer) Run(ctx context.Context) error {
	for {
		if res, err := s.Checkpoint(ctx); err != nil && ctx.Err() == nil && storeerr.Unavailable(err) {
			s.cfg.Logger.Warn("audit checkpoint failed: the database is unavailable", "err", err)
		} else if err != nil && ctx.Err() == nil {
			s.cfg.Logger.Error("audit checkpoint failed", "err", err)
		} else if err == nil && res.New {
			s.cfg.Logger.Info("audit checkpoint signed", "seq", res.Checkpoint.Seq, "heads", len(res.Checkpoint.Heads), "key_id", s.keyID)
		}
		if err := clock.Sleep(ctx, s.cfg.Interval); err != nil {
			return nil
		}
	}
}

// Checkpoint signs the heads of the reviews whose streams grew since the
// latest checkpoint, chained onto it, and stores the new checkpoint; with
// an Archive, it then archives every stored checkpoint the archive lacks
// (a failure there is logged and counted, and does not fail the round).
func (s *Signer) Checkpoint(ctx context.Context) (Signed, error) {
	res, err := s.sign(ctx)
	if err == nil && s.archiver != nil {
		s.archiver.catchUp(ctx)
	}
	return res, err
}

// sign is Checkpoint without the archive.
func (s *Signer) sign(ctx context.Context) (Signed, error) {
	unlock, err := s.cfg.Checkpoints.lock(ctx)
	if err != nil {
		return Signed{}, err
	}
	defer unlock()

	next := Checkpoint{Seq: 1, KeyID: s.keyID}
	var prev Checkpoint
	latest, ok, err := s.cfg.Checkpoints.latest(ctx)
	if err != nil {
		return Signed{}, err
	}
	if ok {
		if prev, err = ParseCheckpoint(latest.Body); err != nil || prev.Seq != latest.Seq {
			return Signed{}, fmt.Errorf("latest audit checkpoint #%d cannot be read (altered?): %v", latest.Seq, err)
		}
		// A checkpoint of another key (before a key change) cannot be
		// checked here; one of this key that does not verify is altered,
		// and nothing is chained onto it.
		if prev.KeyID == s.keyID && !ed25519.Verify(s.pub, latest.Body, latest.Signature) {
			return Signed{}, fmt.Errorf("latest audit checkpoint #%d does not verify with key %s (altered): not chaining onto it", latest.Seq, s.keyID)
		}
		next.Seq, next.Prev, next.Position = prev.Seq+1, Digest(latest.Body), prev.Position
	}

	ids, pos, err := s.grown(ctx, next.Position)
	if err != nil {
		return Signed{}, err
	}
	res := Signed{Checkpoint: prev}
	if ok {
		res.Signature = latest.Signature
	}
	if len(ids) == 0 {
		return res, nil
	}
	signed, err := s.cfg.Checkpoints.signedHeads(ctx, ids)
	if err != nil {
		return Signed{}, err
	}
	for _, id := range ids {
		head, why, err := s.head(ctx, id, signed)
		if err != nil {
			return Signed{}, err
		}
		if why != "" {
			s.cfg.Logger.Error("audit checkpoint: review not signed", "review_id", id, "reason", why)
			res.Refused = append(res.Refused, id)
			continue
		}
		next.Heads = append(next.Heads, head)
	}
	if len(next.Heads) == 0 {
		return res, nil
	}
	next.Position, next.SignedAt = pos, s.cfg.Now().UTC()
	body, sig := Sign(next, s.cfg.Key)
	if err := s.cfg.Checkpoints.insert(ctx, Stored{Seq: next.Seq, Body: body, Signature: sig}, next); err != nil {
		return Signed{}, err
	}
	res.Checkpoint, res.Signature, res.New = next, sig, true
	return res, nil
}

// grown returns the review IDs, in order, of the review streams appended
// to after pos (at most MaxHeads of them) and the position read up to.
func (s *Signer) grown(ctx context.Context, pos eventstore.Position) ([]string, eventstore.Position, error) {
	prefix := domain.StreamName("")
	seen := make(map[string]bool)
	for len(seen) < s.cfg.MaxHeads {
		batch, err := s.cfg.Store.ReadAll(ctx, pos, 1000)
		if err != nil {
			return nil, pos, fmt.Errorf("audit checkpoint: read ledger after %s: %w", pos, err)
		}
		if len(batch) == 0 {
			break
		}
		for _, e := range batch {
			pos = e.Position
			if id, ok := strings.CutPrefix(e.Stream, prefix); ok {
				seen[id] = true
				if len(seen) == s.cfg.MaxHeads {
					break
				}
			}
		}
	}
	ids := make([]string, 0, len(seen))
	for id := range seen {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, pos, nil
}

// head reads a review's head to sign, or says why it must not be signed.
func (s *Signer) head(ctx context.Context, id string, signed map[string]signedHead) (Head, string, error) {
	h, err := s.cfg.Histories.History(ctx, id)
	switch {
	case errors.Is(err, domain.ErrReviewNotFound):
		return Head{}, "its events are gone", nil
	case errors.Is(err, domain.ErrCorruptHistory):
		return Head{}, "an event cannot be read: " + err.Error(), nil
	case err != nil:
		return Head{}, "", err
	}
	if err := h.Verify(); err != nil {
		return Head{}, "hash chain broken: " + err.Error(), nil
	}
	if p, ok := signed[id]; ok {
		if p.Revision >= uint64(len(h.Events)) || h.Events[p.Revision].Metadata.Hash != p.Hash || ViewDigest(h, p.Revision) != p.Digest {
			return Head{}, fmt.Sprintf("the history no longer extends revision %d as checkpoint #%d signed it", p.Revision, p.seq), nil
		}
	}
	last := h.Events[len(h.Events)-1]
	return Head{ReviewID: id, Revision: last.Revision, Hash: last.Metadata.Hash, Digest: ViewDigest(h, last.Revision)}, "", nil
}
