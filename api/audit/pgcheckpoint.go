package audit

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/eventstore/storeerr"
)

// PGCheckpoints keeps signed checkpoints in PostgreSQL (migration
// 0050_audit_checkpoint).
type PGCheckpoints struct {
	Pool *pgxpool.Pool
	// Sessions is where the signing lock is taken, on a session of its
	// own (a transaction pooler in front of Pool would not keep it);
	// default Pool.
	Sessions *pgxpool.Pool
}

// sessions is the pool of the signing lock's session.
func (p PGCheckpoints) sessions() *pgxpool.Pool {
	if p.Sessions != nil {
		return p.Sessions
	}
	return p.Pool
}

// Stored is a checkpoint as stored: its body and signature.
type Stored struct {
	Seq       int64
	Body      []byte
	Signature []byte
}

// signLock is the advisory lock a signing round holds: the bytes of
// "rlsigner" as a bigint.
const signLock int64 = 0x726c7369676e6572

// All returns every stored checkpoint in seq order.
func (p PGCheckpoints) All(ctx context.Context) ([]Stored, error) {
	rows, _ := p.Pool.Query(ctx, `SELECT seq, body, signature FROM audit_checkpoint ORDER BY seq`)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Stored])
	if err != nil {
		return nil, storeerr.Wrap(ctx, "read audit checkpoints", err)
	}
	return out, nil
}

// latest returns the newest stored checkpoint; ok is false when there is
// none.
func (p PGCheckpoints) latest(ctx context.Context) (s Stored, ok bool, err error) {
	err = p.Pool.QueryRow(ctx, `SELECT seq, body, signature FROM audit_checkpoint ORDER BY seq DESC LIMIT 1`).
		Scan(&s.Seq, &s.Body, &s.Signature)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Stored{}, false, nil
	case err != nil:
		return Stored{}, false, storeerr.Wrap(ctx, "read the latest audit checkpoint", err)
	}
	return s, true, nil
}

// signedHeads returns the newest signed head of each of the reviews, with
// the seq of the checkpoint that signed it.
func (p PGCheckpoints) signedHeads(ctx context.Context, ids []string) (map[string]signedHead, error) {
	rows, _ := p.Pool.Query(ctx, `SELECT review_id, seq, revision, hash, digest FROM audit_signed_head WHERE review_id = ANY($1)`, ids)
	out := make(map[string]signedHead, len(ids))
	var (
		h   signedHead
		rev int64
	)
	_, err := pgx.ForEachRow(rows, []any{&h.ReviewID, &h.seq, &rev, &h.Hash, &h.Digest}, func() error {
		h.Revision = uint64(rev)
		out[h.ReviewID] = h
		return nil
	})
	if err != nil {
		return nil, storeerr.Wrap(ctx, "read signed heads", err)
	}
	return out, nil
}

type signedHead struct {
	Head
	seq int64
}

// insert stores a new checkpoint and moves the reviews' signed heads to it,
// in one transaction.
func (p PGCheckpoints) insert(ctx context.Context, s Stored, c Checkpoint) error {
	err := pgx.BeginFunc(ctx, p.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO audit_checkpoint (seq, signed_at, key_id, body, signature) VALUES ($1, $2, $3, $4, $5)`,
			s.Seq, c.SignedAt, c.KeyID, s.Body, s.Signature); err != nil {
			return err
		}
		ids, revs, hashes, digests := make([]string, len(c.Heads)), make([]int64, len(c.Heads)), make([]string, len(c.Heads)), make([]string, len(c.Heads))
		for i, h := range c.Heads {
			ids[i], revs[i], hashes[i], digests[i] = h.ReviewID, int64(h.Revision), h.Hash, h.Digest
		}
		_, err := tx.Exec(ctx, `INSERT INTO audit_signed_head (review_id, seq, revision, hash, digest)
			SELECT u.id, $1, u.rev, u.hash, u.digest FROM unnest($2::text[], $3::bigint[], $4::text[], $5::text[]) AS u(id, rev, hash, digest)
			ON CONFLICT (review_id) DO UPDATE SET seq = EXCLUDED.seq, revision = EXCLUDED.revision, hash = EXCLUDED.hash, digest = EXCLUDED.digest`,
			s.Seq, ids, revs, hashes, digests)
		return err
	})
	if err != nil {
		return storeerr.Wrap(ctx, "store audit checkpoint", err)
	}
	return nil
}

// lock waits for the signing lock, held on a connection of its own outside
// any transaction: a transaction open during the round would hold back the
// ledger's global order (pgstore reads only below the oldest running
// transaction), the very order the round reads.
func (p PGCheckpoints) lock(ctx context.Context) (unlock func(), err error) {
	conn, err := p.sessions().Acquire(ctx)
	if err != nil {
		return nil, storeerr.Wrap(ctx, "audit signing lock", err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, signLock); err != nil {
		conn.Release()
		return nil, storeerr.Wrap(ctx, "audit signing lock", err)
	}
	return func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, `SELECT pg_advisory_unlock($1)`, signLock); err != nil {
			_ = conn.Hijack().Close(uctx) // closing the session releases the lock
			return
		}
		conn.Release()
	}, nil
}

// from returns up to limit stored checkpoints from seq on, in seq order.
func (p PGCheckpoints) from(ctx context.Context, seq int64, limit int) ([]Stored, error) {
	rows, _ := p.Pool.Query(ctx, `SELECT seq, body, signature FROM audit_checkpoint WHERE seq >= $1 ORDER BY seq LIMIT $2`, seq, limit)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Stored])
	if err != nil {
		return nil, storeerr.Wrap(ctx, "read audit checkpoints", err)
	}
	return out, nil
}
