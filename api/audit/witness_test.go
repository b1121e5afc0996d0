package audit_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/api/audit"
	"github.com/reviewledger/reviewledger/eventstore/storeerr"
	"github.com/reviewledger/reviewledger/migrations"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// TestWitnessMarksOfManyAndOfFew: the PostgreSQL witnesses give the marks
// of exactly the reviews asked for, whether few (each looked up) or many
// (read as a span of the key, rows in it not asked for left out), and of
// every review for nil.
func TestWitnessMarksOfManyAndOfFew(t *testing.T) {
	ctx := context.Background()
	pool := dbtest.Pool(t)
	for _, sql := range []string{
		`INSERT INTO audit_anchor_page SELECT * FROM audit_anchor_pack(array_fill(0::bigint, ARRAY[3000]),
			ARRAY(SELECT format('r%s', lpad(g::text, 4, '0')) FROM generate_series(0, 2999) g), ARRAY(SELECT g FROM generate_series(0, 2999) g),
			ARRAY(SELECT sha256(g::text::bytea) FROM generate_series(0, 2999) g), now())`,
		`INSERT INTO review_summary (review_id, content_class, state, attempts, version, submitted_at, deadline, human_gate, updated_at)
			SELECT format('r%s', lpad(g::text, 4, '0')), 'caption_suggestion', 'accepted', 1, g, now(), now(), false, now() FROM generate_series(0, 2999) g`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	// Every other review from r0501 to r2999 (1,250, read as a span), and
	// one that no witness knows; then three (looked up).
	var many []string
	for i := 501; i < 3000; i += 2 { // r0500 is a page's first_id: the span starts inside its page
		many = append(many, fmt.Sprintf("r%04d", i))
	}
	many = append(many, "r1001x")
	few := []string{"r0007", "r2999", "nowhere"}
	for _, w := range []audit.Witness{audit.PGAnchors{Pool: pool}, audit.PGSummaries{Pool: pool}} {
		for _, ids := range [][]string{many, few} {
			got, err := w.Marks(ctx, ids)
			if err != nil {
				t.Fatal(err)
			}
			known := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == "r1001x" || id == "nowhere" })
			if keys := slices.Sorted(maps.Keys(got)); !slices.Equal(keys, known) {
				t.Fatalf("%s: marks of %d reviews asked for (%d known): got %d: %v", w.Name(), len(ids), len(known), len(keys), keys)
			}
			var rev uint64
			if _, err := fmt.Sscanf(known[0], "r%d", &rev); err != nil || got[known[0]].Revision != rev {
				t.Fatalf("%s: mark of %s: %+v", w.Name(), known[0], got[known[0]])
			}
			// An anchor's hash is stored as its bytes and read as hex.
			_, anchors := w.(audit.PGAnchors)
			if sum := sha256.Sum256(fmt.Append(nil, rev)); anchors && got[known[0]].Hash != hex.EncodeToString(sum[:]) {
				t.Fatalf("%s: hash of %s: %q, want the hex of its 32 bytes", w.Name(), known[0], got[known[0]].Hash)
			}
		}
		all, err := w.Marks(ctx, nil)
		if err != nil || len(all) != 3000 {
			t.Fatalf("%s: marks of every review: %d, %v; want 3000", w.Name(), len(all), err)
		}
	}
}

// Anchors written before migration 0033 (hashes as hex text) read the
// same after it, which stores them as their bytes, and after 0051, which
// packs them in pages, each applied last as an upgrade applies it; and
// the table of 0033 refuses a hash that is not 32 bytes.
func TestAnchorsKeepTheirHashesThroughMigrations(t *testing.T) {
	ctx := context.Background()
	pool := dbtest.EmptySchema(t, "before")
	dbtest.Apply(t, pool, func(m migrations.Migration) bool { return m.Version < 33 })
	if _, err := pool.Exec(ctx, `INSERT INTO audit_anchor (review_id, revision, hash, anchored_at)
		SELECT 'r' || g, g, encode(sha256(g::text::bytea), 'hex'), now() FROM generate_series(1, 300) g`); err != nil {
		t.Fatal(err)
	}
	between := func(m migrations.Migration) bool { return m.Version >= 33 && m.Version < 51 }
	all, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	if n, want := dbtest.Apply(t, pool, between), len(slices.DeleteFunc(all, func(m migrations.Migration) bool { return !between(m) })); n != want || want == 0 {
		t.Fatalf("%d migrations from 0033 to 0050 applied, want %d", n, want)
	}
	_, err = pool.Exec(ctx, `INSERT INTO audit_anchor (review_id, revision, hash_bytes, anchored_at) VALUES ('short', 1, '\x01', now())`)
	if storeerr.Code(err) != storeerr.CodeCheckViolation {
		t.Fatalf("a hash of one byte: %v, want a check violation", err)
	}
	if n := dbtest.Apply(t, pool, func(m migrations.Migration) bool { return m.Version >= 51 }); n == 0 {
		t.Fatal("no migration from 0051 on applied")
	}
	var (
		pages   int
		lz4     bool
		methods string
	)
	err = pool.QueryRow(ctx, `SELECT count(*), string_agg(DISTINCT coalesce(pg_column_compression(anchors), 'none'), ',') FILTER (WHERE octet_length(anchors) > 4096),
		(SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression')
		FROM audit_anchor_page`).Scan(&pages, &methods, &lz4)
	if err != nil || pages != 3 {
		t.Fatalf("300 anchors in %d pages (%v), want 3 (128, 128, 44)", pages, err)
	}
	stored, err := audit.AnchorPages(ctx, pool)
	if err != nil || len(stored) != 3 || len(stored[0].IDs) != 128 || len(stored[1].IDs) != 128 || len(stored[2].IDs) != 44 {
		t.Fatalf("pages after the migration: %d (%v), want 128, 128 and 44 anchors", len(stored), err)
	}
	switch {
	case lz4 && methods != "lz4":
		t.Errorf("full pages compressed with %s, want lz4 (this server has it)", methods)
	case !lz4:
		t.Logf("this server has no lz4: full pages compressed with %s", methods)
	}
	got, err := audit.PGAnchors{Pool: pool}.Marks(ctx, nil)
	if err != nil || len(got) != 300 {
		t.Fatalf("marks after the migrations: %d, %v; want 300", len(got), err)
	}
	for i := 1; i <= 300; i++ {
		sum := sha256.Sum256(fmt.Append(nil, i))
		if m := got[fmt.Sprint("r", i)]; m.Revision != uint64(i) || m.Hash != hex.EncodeToString(sum[:]) {
			t.Fatalf("r%d: %+v, want revision %d and hash %x", i, m, i, sum)
		}
	}
}

// TestAnchorPagesAdvance: Advance keeps the anchors packed in pages that
// never overlap. It moves anchors forward only (a hash at the same
// revision replaces the old one), splits a page grown past 128 into two
// of about half, gives reviews before every page pages of their own,
// leaves pages it has nothing for as they are, and a page that cannot be
// read is an error naming it.
func TestAnchorPagesAdvance(t *testing.T) {
	ctx := context.Background()
	pool := dbtest.Pool(t)
	a := audit.PGAnchors{Pool: pool}
	hash := func(s string) string { sum := sha256.Sum256([]byte(s)); return hex.EncodeToString(sum[:]) }
	marks := func(from, to, step int, rev uint64, salt string) map[string]audit.Mark {
		out := map[string]audit.Mark{}
		for i := from; i < to; i += step {
			id := fmt.Sprintf("p%04d", i)
			out[id] = audit.Mark{Revision: rev, Hash: hash(id + salt)}
		}
		return out
	}
	advance := func(ms map[string]audit.Mark, at time.Time) {
		t.Helper()
		if err := a.Advance(ctx, ms, at); err != nil {
			t.Fatal(err)
		}
	}
	type page struct {
		first   string
		at      time.Time
		anchors int
	}
	// pages returns the pages with their anchored_at and how many anchors
	// each holds, after checking that they never overlap: each holds its
	// reviews in the order of their bytes, the first its first_id, the
	// last before the next page's first_id, and no review is in two.
	pages := func() []page {
		t.Helper()
		stored, err := audit.AnchorPages(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		var ps []page
		for i, p := range stored {
			if len(p.IDs) == 0 || p.IDs[0] != p.First || !slices.IsSorted(p.IDs) || len(p.IDs) > 128 {
				t.Fatalf("page %q holds %v: want 1 to 128 reviews in order, the first its first_id", p.First, p.IDs)
			}
			if i+1 < len(stored) && p.IDs[len(p.IDs)-1] >= stored[i+1].First {
				t.Fatalf("page %q ends at %q, not before the next page, %q", p.First, p.IDs[len(p.IDs)-1], stored[i+1].First)
			}
			for _, id := range p.IDs {
				if seen[id] {
					t.Fatalf("review %s in two pages", id)
				}
				seen[id] = true
			}
			var at time.Time
			if err := pool.QueryRow(ctx, `SELECT anchored_at FROM audit_anchor_page WHERE first_id = $1`, p.First).Scan(&at); err != nil {
				t.Fatal(err)
			}
			ps = append(ps, page{first: p.First, at: at, anchors: len(p.IDs)})
		}
		return ps
	}
	// 200 reviews, every other from p1000: two pages of 100.
	advance(marks(1000, 1400, 2, 1, ""), t0)
	if ps := pages(); len(ps) != 2 || ps[0].first != "p1000" || ps[0].anchors != 100 || ps[1].anchors != 100 {
		t.Fatalf("200 anchors: pages %+v, want two of 100 from p1000", ps)
	}
	// 40 reviews joining the first page (p1001, p1003, …): it splits in
	// two of 70; the second page is left as it was.
	advance(marks(1001, 1081, 2, 1, ""), t0.Add(time.Hour))
	ps := pages()
	if len(ps) != 3 || ps[0].anchors != 70 || ps[1].anchors != 70 || ps[2].anchors != 100 ||
		!ps[0].at.Equal(t0.Add(time.Hour)) || !ps[2].at.Equal(t0) {
		t.Fatalf("after 40 joined the first page: %+v, want 70 and 70 at %s, then the 100 of before at %s", ps, t0.Add(time.Hour), t0)
	}
	// Reviews before every page, and anchors moved back, forward and to
	// another hash at the same revision.
	advance(map[string]audit.Mark{
		"a0001": {Revision: 3, Hash: hash("a")},
		"p1000": {Revision: 0, Hash: hash("back")},
		"p1002": {Revision: 5, Hash: hash("forward")},
		"p1398": {Revision: 1, Hash: hash("same revision")},
	}, t0.Add(2*time.Hour))
	got, err := a.Marks(ctx, []string{"a0001", "p1000", "p1002", "p1398", "p1399"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]audit.Mark{
		"a0001": {Revision: 3, Hash: hash("a")},
		"p1000": {Revision: 1, Hash: hash("p1000")},
		"p1002": {Revision: 5, Hash: hash("forward")},
		"p1398": {Revision: 1, Hash: hash("same revision")},
	}
	if !maps.Equal(got, want) {
		t.Fatalf("marks after moves back, forward and sideways:\n%v\nwant\n%v", got, want)
	}
	if ps := pages(); len(ps) != 4 || ps[0].first != "a0001" || ps[0].anchors != 1 {
		t.Fatalf("pages after a review before every page: %+v, want one of its own first", ps)
	}
	// Marks behind or equal to those stored change no page.
	before := pages()
	advance(map[string]audit.Mark{"p1000": {Revision: 0, Hash: hash("back")}, "p1100": {Revision: 1, Hash: hash("p1100")}}, t0.Add(3*time.Hour))
	if after := pages(); !slices.Equal(after, before) {
		t.Fatalf("marks behind or equal to the stored ones rewrote pages: %+v, want %+v", after, before)
	}
	for _, id := range []string{"", strings.Repeat("x", 1<<15)} {
		if err := a.Advance(ctx, map[string]audit.Mark{id: {Revision: 1, Hash: hash(id)}}, t0); err == nil || !strings.Contains(err.Error(), "1 to 32767 bytes") {
			t.Errorf("a review ID of %d bytes: %v, want it refused", len(id), err)
		}
	}
	if _, err := pool.Exec(ctx, `UPDATE audit_anchor_page SET anchors = substring(anchors from 1 for 20) WHERE first_id = 'p1000'`); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Marks(ctx, nil); err == nil || !strings.Contains(err.Error(), `audit anchor page "p1000"`) {
		t.Fatalf("a page cut short: %v, want an error naming it", err)
	}
}
