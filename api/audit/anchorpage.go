package audit

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/eventstore/storeerr"
)

// PGAnchors keeps audit anchors in PostgreSQL, packed in pages of up to
// 128 reviews (audit_anchor_page, migration 0051_audit_anchor_pages; the
// format is described there). A Mark's hash is hex; a page holds its 32
// bytes.
type PGAnchors struct {
	Pool *pgxpool.Pool
}

var (
	_ Anchors      = PGAnchors{}
	_ ReviewLister = PGAnchors{}
)

// Name implements Witness.
func (PGAnchors) Name() string { return "audit anchor" }

// pageOf is the subquery of the first_id of the page of the review ID
// id: the greatest first_id not after it (pages never overlap), found
// through the key; NULL before every page.
func pageOf(id string) string {
	return `(SELECT first_id FROM audit_anchor_page WHERE first_id <= ` + id + ` ORDER BY first_id DESC LIMIT 1)`
}

// The statements that read pages: every page; the pages of the reviews
// of $1, each looked up (LIMIT 1 keeps the lookup a lookup: joined, a few
// hundred pages are read whole instead); the pages from the one of the
// least review of $1 to the one of the greatest, one range of the key.
var (
	pagesAll   = `SELECT first_id, anchors FROM audit_anchor_page`
	pagesOfIDs = `SELECT p.first_id, p.anchors
		FROM (SELECT DISTINCT ` + pageOf("m.id") + ` AS first_id FROM unnest($1::text[]) AS m(id)) s
		CROSS JOIN LATERAL (SELECT first_id, anchors FROM audit_anchor_page WHERE first_id = s.first_id LIMIT 1) p`
	pagesSpan = `WITH r AS (SELECT min(id) AS lo, max(id) AS hi FROM unnest($1::text[]) id)
		SELECT p.first_id, p.anchors FROM r JOIN audit_anchor_page p
		ON p.first_id >= coalesce(` + pageOf("r.lo") + `, r.lo) AND p.first_id <= r.hi`
)

// Marks implements Witness: the pages that hold the reviews of ids, each
// looked up when they are fewer than spanFrom, read as one range of the
// key otherwise (as readMarks reads a table of rows).
func (a PGAnchors) Marks(ctx context.Context, ids []string) (map[string]Mark, error) {
	var rows pgx.Rows
	switch {
	case ids == nil:
		rows, _ = a.Pool.Query(ctx, pagesAll)
	case len(ids) < spanFrom:
		rows, _ = a.Pool.Query(ctx, pagesOfIDs, ids)
	default:
		rows, _ = a.Pool.Query(ctx, pagesSpan, ids)
	}
	var asked map[string]struct{}
	if ids != nil {
		asked = make(map[string]struct{}, len(ids))
		for _, id := range ids {
			asked[id] = struct{}{}
		}
	}
	out := make(map[string]Mark, len(ids))
	err := eachPage(ctx, rows, func(_, id string, m Mark) error {
		if _, ok := asked[id]; ok || asked == nil {
			out[id] = m
		}
		return nil
	})
	return out, err
}

// ReviewIDs implements ReviewLister.
func (a PGAnchors) ReviewIDs(ctx context.Context, each func(id string) error) error {
	rows, _ := a.Pool.Query(ctx, pagesAll)
	return eachPage(ctx, rows, func(_, id string, _ Mark) error { return each(id) })
}

// anchorLock is the advisory lock an Advance holds: one at a time
// rewrites pages.
const anchorLock = 0x726c616e63686f72 // "rlanchor"

// Advance implements Anchors, in one transaction: it reads the pages that
// hold the reviews of marks, moves their anchors forward (never back),
// and writes those pages again, each packed anew with the reviews it
// gained (audit_anchor_pack). Reviews before every page make pages of
// their own. Pages holding none of marks' reviews are left as they are.
func (a PGAnchors) Advance(ctx context.Context, marks map[string]Mark, at time.Time) error {
	if len(marks) == 0 {
		return nil
	}
	ids := slices.Sorted(maps.Keys(marks))
	err := pgx.BeginFunc(ctx, a.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(anchorLock)); err != nil {
			return err
		}
		pages, err := a.pagesOf(ctx, tx, ids)
		if err != nil {
			return err
		}
		var (
			firsts []string // of the pages read, to delete
			groups []int64
			pIDs   []string
			revs   []int64
			hashes [][]byte
		)
		for g, p := range pages {
			if p.first != "" {
				firsts = append(firsts, p.first)
			}
			for id, m := range p.marks {
				if n, ok := marks[id]; ok && n.Revision >= m.Revision {
					m = n
				}
				hash, err := anchorHash(id, m)
				if err != nil {
					return err
				}
				groups, pIDs, revs, hashes = append(groups, int64(g)), append(pIDs, id), append(revs, int64(m.Revision)), append(hashes, hash)
			}
		}
		if _, err := tx.Exec(ctx, `DELETE FROM audit_anchor_page p USING unnest($1::text[]) AS f(first) WHERE p.first_id = f.first`, firsts); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO audit_anchor_page (first_id, anchored_at, anchors)
			SELECT first_id, anchored_at, anchors FROM audit_anchor_pack($1, $2, $3, $4, $5)`, groups, pIDs, revs, hashes, at)
		return err
	})
	if err != nil {
		return storeerr.Wrap(ctx, "advance audit anchors", err)
	}
	return nil
}

// anchorPage is a page of anchors as Advance rewrites it: first is its
// first_id ("" for the reviews before every page), marks its anchors and
// the reviews joining it.
type anchorPage struct {
	first string
	marks map[string]Mark
}

// pagesOf reads, in tx, the pages of the reviews of ids: every review of
// ids is in one of them, with its stored mark when it has one (a zero
// mark otherwise, which any mark moves).
func (a PGAnchors) pagesOf(ctx context.Context, tx pgx.Tx, ids []string) ([]*anchorPage, error) {
	rows, _ := tx.Query(ctx, pageOfEach, ids)
	byFirst := make(map[string]*anchorPage)
	var id, first string
	_, err := pgx.ForEachRow(rows, []any{&id, &first}, func() error {
		p := byFirst[first]
		if p == nil {
			p = &anchorPage{first: first, marks: make(map[string]Mark)}
			byFirst[first] = p
		}
		p.marks[id] = Mark{}
		return nil
	})
	if err != nil {
		return nil, err
	}
	rows, _ = tx.Query(ctx, pagesByFirst, slices.Collect(maps.Keys(byFirst)))
	err = eachPage(ctx, rows, func(first, id string, m Mark) error {
		byFirst[first].marks[id] = m
		return nil
	})
	return slices.Collect(maps.Values(byFirst)), err
}

// pageOfEach gives each review of $1 with the first_id of its page (empty
// before every page) in one sort: the reviews and the first_ids of the
// pages of their span, ordered together, a page before a review of the
// same ID, each review taking the greatest first_id before it.
var pageOfEach = `WITH r AS (SELECT min(id) AS lo, max(id) AS hi FROM unnest($1::text[]) id),
	u AS (
		SELECT id AS key, false AS page FROM unnest($1::text[]) id
		UNION ALL
		SELECT p.first_id, true FROM r JOIN audit_anchor_page p ON p.first_id >= coalesce(` + pageOf("r.lo") + `, r.lo) AND p.first_id <= r.hi
	)
	SELECT key, first FROM (
		SELECT key, page, coalesce(max(key) FILTER (WHERE page) OVER (ORDER BY key, page DESC ROWS UNBOUNDED PRECEDING), '') AS first
		FROM u
	) s WHERE NOT page`

// pagesByFirst reads the pages whose first_id is in $1, each looked up.
const pagesByFirst = `SELECT p.first_id, p.anchors FROM unnest($1::text[]) AS f(first)
	CROSS JOIN LATERAL (SELECT first_id, anchors FROM audit_anchor_page WHERE first_id = f.first LIMIT 1) p`

// anchorHash returns the 32 bytes of m's hash, which must be the hex of
// a SHA-256.
func anchorHash(id string, m Mark) ([]byte, error) {
	b, err := hex.DecodeString(m.Hash)
	if err != nil || len(b) != sha256.Size {
		return nil, fmt.Errorf("anchor of %s: hash %q is not the hex of 32 bytes", id, m.Hash)
	}
	return b, nil
}

// errPage is a page whose anchors cannot be read.
var errPage = errors.New("audit anchor page is malformed")

// eachPage calls each with the anchors of every page of rows (first_id,
// anchors), in their order in the page; an error of each stops it.
func eachPage(ctx context.Context, rows pgx.Rows, each func(first, id string, m Mark) error) error {
	var (
		first string
		b     []byte
	)
	_, err := pgx.ForEachRow(rows, []any{&first, &b}, func() error {
		return decodePage(b, func(id string, m Mark) error { return each(first, id, m) })
	})
	switch {
	case errors.Is(err, errPage):
		return fmt.Errorf("audit anchor page %q: %w", first, err)
	case err != nil && rows.Err() != nil:
		return storeerr.Wrap(ctx, "read audit anchors", err)
	}
	return err
}

// decodePage calls each with every anchor of page b, in order: the ID's
// length (2 bytes) and the ID, the revision (8 bytes), the hash (32).
func decodePage(b []byte, each func(id string, m Mark) error) error {
	for len(b) > 0 {
		if len(b) < 2 {
			return fmt.Errorf("%w: %d bytes after its last anchor", errPage, len(b))
		}
		n := int(binary.BigEndian.Uint16(b))
		if n == 0 || len(b) < 2+n+8+sha256.Size {
			return fmt.Errorf("%w: an anchor of %d bytes, its ID %d", errPage, len(b), n)
		}
		id := string(b[2 : 2+n])
		rev := binary.BigEndian.Uint64(b[2+n:])
		b = b[2+n+8:]
		if err := each(id, Mark{Revision: rev, Hash: hex.EncodeToString(b[:sha256.Size])}); err != nil {
			return err
		}
		b = b[sha256.Size:]
	}
	return nil
}
