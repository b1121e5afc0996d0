package audit

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math"
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
// id (an expression of collation "C"): the greatest first_id not after
// it (pages never overlap), found through the key; NULL before every
// page.
func pageOf(id string) string {
	return `(SELECT first_id FROM audit_anchor_page WHERE first_id <= ` + id + ` ORDER BY first_id DESC LIMIT 1)`
}

// idsOf is the review IDs of $1 as a table m(id), ordered by their bytes
// as first_id is (COLLATE "C", migration 0051).
const idsOf = `(SELECT x COLLATE "C" AS id FROM unnest($1::text[]) AS x) m`

// The span of $1: r holds the least and the greatest of its reviews
// (spanOf), and inSpan joins the pages p from the one of the least to the
// one of the greatest, one range of the key.
var (
	spanOf = `WITH r AS (SELECT min(id) AS lo, max(id) AS hi FROM ` + idsOf + `)`
	inSpan = `r JOIN audit_anchor_page p ON p.first_id >= coalesce(` + pageOf("r.lo") + `, r.lo) AND p.first_id <= r.hi`
)

// pageFirst joins the page p whose first_id is first, looked up (LIMIT 1
// keeps the lookup a lookup: joined, a few hundred pages are read whole
// instead).
func pageFirst(first string) string {
	return `CROSS JOIN LATERAL (SELECT first_id, anchors FROM audit_anchor_page WHERE first_id = ` + first + ` LIMIT 1) p`
}

// The statements that read pages: every page; the pages of the reviews
// of $1, each looked up; the pages of their span.
var (
	pagesAll   = `SELECT first_id, anchors FROM audit_anchor_page`
	pagesOfIDs = `SELECT p.first_id, p.anchors
		FROM (SELECT DISTINCT ` + pageOf("m.id") + ` AS first_id FROM ` + idsOf + `) s ` + pageFirst("s.first_id")
	pagesSpan = spanOf + ` SELECT p.first_id, p.anchors FROM ` + inSpan
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
		asked = askedSet(ids)
	}
	out := make(map[string]Mark, len(ids))
	err := eachPage(ctx, rows, func(_, id string, m Mark) error {
		if _, ok := asked[id]; ok || asked == nil {
			out[id] = m
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ReviewIDs implements ReviewLister.
func (a PGAnchors) ReviewIDs(ctx context.Context, each func(id string) error) error {
	rows, _ := a.Pool.Query(ctx, pagesAll)
	return eachPage(ctx, rows, func(_, id string, _ Mark) error { return each(id) })
}

// anchorLock is the advisory lock an Advance holds: one at a time
// rewrites pages.
const anchorLock = 0x726c616e63686f72 // "rlanchor"

// Advance implements Anchors, in one READ COMMITTED transaction: it
// reads the pages that hold the reviews of marks, moves their anchors
// forward (never back; a hash at the same revision replaces the one
// stored), and writes again each page where an anchor moved or a review
// joined, packed anew (audit_anchor_pack). Reviews before every page make
// pages of their own. Pages holding none of marks' reviews, or whose
// anchors are all ahead of marks', are left as they are.
func (a PGAnchors) Advance(ctx context.Context, marks map[string]Mark, at time.Time) error {
	if len(marks) == 0 {
		return nil
	}
	ids := slices.Sorted(maps.Keys(marks))
	for _, id := range ids {
		if len(id) == 0 || len(id) > math.MaxInt16 {
			return fmt.Errorf("advance audit anchors: review ID %.40q: a page holds IDs of 1 to %d bytes", id, math.MaxInt16)
		}
	}
	err := pgx.BeginTxFunc(ctx, a.Pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(anchorLock)); err != nil {
			return err
		}
		pages, err := a.pagesOf(ctx, tx, ids)
		if err != nil {
			return err
		}
		var w packed
		for g, p := range pages {
			if err := w.add(int64(g), p, marks); err != nil {
				return err
			}
		}
		if len(w.ids) == 0 {
			return nil
		}
		_, err = tx.Exec(ctx, `DELETE FROM audit_anchor_page p USING unnest($1::text[]) AS f(first) WHERE p.first_id = f.first COLLATE "C"`, w.firsts)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO audit_anchor_page (first_id, anchored_at, anchors)
			SELECT first_id, anchored_at, anchors FROM audit_anchor_pack($1, $2, $3, $4, $5)`, w.groups, w.ids, w.revs, w.hashes, at)
		return err
	})
	if err != nil {
		return storeerr.Wrap(ctx, "advance audit anchors", err)
	}
	return nil
}

// packed is what Advance writes: the first_ids of the pages it replaces,
// and the anchors of the pages that replace them, each with its group
// (the page it was read from).
type packed struct {
	firsts []string
	groups []int64
	ids    []string
	revs   []int64
	hashes [][]byte
}

// add adds page p as group g, its anchors moved to marks, when one of
// them moves or a review joins it; a page where nothing changes is left
// out.
func (w *packed) add(g int64, p *anchorPage, marks map[string]Mark) error {
	changed := false
	start := len(w.ids)
	for id, m := range p.marks {
		n, asked := marks[id]
		_, joins := p.joining[id]
		if joins || asked && n.Revision >= m.Revision && (n.Revision != m.Revision || n.Hash != m.Hash) {
			m, changed = n, true
		}
		hash, err := anchorHash(id, m)
		if err != nil {
			return err
		}
		w.groups, w.ids, w.revs, w.hashes = append(w.groups, g), append(w.ids, id), append(w.revs, int64(m.Revision)), append(w.hashes, hash)
	}
	if !changed {
		w.groups, w.ids, w.revs, w.hashes = w.groups[:start], w.ids[:start], w.revs[:start], w.hashes[:start]
		return nil
	}
	if p.first != "" {
		w.firsts = append(w.firsts, p.first)
	}
	return nil
}

// anchorPage is a page of anchors as Advance reads it: first is its
// first_id ("" for the reviews before every page), marks its anchors,
// joining the reviews asked for that it has no anchor of yet.
type anchorPage struct {
	first   string
	marks   map[string]Mark
	joining map[string]struct{}
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
			p = &anchorPage{first: first, marks: make(map[string]Mark), joining: make(map[string]struct{})}
			byFirst[first] = p
		}
		p.marks[id], p.joining[id] = Mark{}, struct{}{}
		return nil
	})
	if err != nil {
		return nil, err
	}
	rows, _ = tx.Query(ctx, pagesByFirst, slices.Collect(maps.Keys(byFirst)))
	err = eachPage(ctx, rows, func(first, id string, m Mark) error {
		p := byFirst[first]
		p.marks[id] = m
		delete(p.joining, id)
		return nil
	})
	return slices.Collect(maps.Values(byFirst)), err
}

// pageOfEach gives each review of $1 with the first_id of its page (empty
// before every page) in one sort: the reviews and the first_ids of the
// pages of their span, ordered together, a page before a review of the
// same ID, each review taking the greatest first_id before it.
var pageOfEach = spanOf + `,
	u AS (
		SELECT id AS key, false AS page FROM ` + idsOf + `
		UNION ALL
		SELECT p.first_id, true FROM ` + inSpan + `
	)
	SELECT key, first FROM (
		SELECT key, page, coalesce(max(key) FILTER (WHERE page) OVER (ORDER BY key, page DESC ROWS UNBOUNDED PRECEDING), '') AS first
		FROM u
	) s WHERE NOT page`

// pagesByFirst reads the pages whose first_id is in $1, each looked up.
var pagesByFirst = `SELECT p.first_id, p.anchors FROM unnest($1::text[]) AS f(first) ` + pageFirst(`f.first COLLATE "C"`)

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
