package audit_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"testing"

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
		`INSERT INTO audit_anchor (review_id, revision, hash_bytes, anchored_at) SELECT format('r%s', lpad(g::text, 4, '0')), g, sha256(g::text::bytea), now() FROM generate_series(0, 2999) g`,
		`INSERT INTO review_summary (review_id, content_class, state, attempts, version, submitted_at, deadline, human_gate, updated_at)
			SELECT format('r%s', lpad(g::text, 4, '0')), 'caption_suggestion', 'accepted', 1, g, now(), now(), false, now() FROM generate_series(0, 2999) g`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	// Every other review from r0500 to r2998 (1,250, read as a span), and
	// one that no witness knows; then three (looked up).
	var many []string
	for i := 500; i < 3000; i += 2 {
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

// Anchors written before migration 0033 (hashes as hex text) read the same
// after it, which stores them as their bytes, applied last as an upgrade
// applies it; and the table refuses a hash that is not 32 bytes.
func TestAnchorsKeepTheirHashesThroughMigration0033(t *testing.T) {
	ctx := context.Background()
	pool := dbtest.EmptySchema(t, "before")
	dbtest.Apply(t, pool, func(m migrations.Migration) bool { return m.Version != 33 })
	if _, err := pool.Exec(ctx, `INSERT INTO audit_anchor (review_id, revision, hash, anchored_at)
		SELECT 'r' || g, g, encode(sha256(g::text::bytea), 'hex'), now() FROM generate_series(1, 100) g`); err != nil {
		t.Fatal(err)
	}
	if n := dbtest.Apply(t, pool, func(m migrations.Migration) bool { return m.Version == 33 }); n != 1 {
		t.Fatalf("%d migrations 0033, want 1", n)
	}
	got, err := audit.PGAnchors{Pool: pool}.Marks(ctx, nil)
	if err != nil || len(got) != 100 {
		t.Fatalf("marks after the migration: %d, %v; want 100", len(got), err)
	}
	for i := 1; i <= 100; i++ {
		sum := sha256.Sum256(fmt.Append(nil, i))
		if m := got[fmt.Sprint("r", i)]; m.Revision != uint64(i) || m.Hash != hex.EncodeToString(sum[:]) {
			t.Fatalf("r%d: %+v, want revision %d and hash %x", i, m, i, sum)
		}
	}
	_, err = pool.Exec(ctx, `INSERT INTO audit_anchor (review_id, revision, hash_bytes, anchored_at) VALUES ('short', 1, '\x01', now())`)
	if storeerr.Code(err) != storeerr.CodeCheckViolation {
		t.Fatalf("a hash of one byte: %v, want a check violation", err)
	}
}
