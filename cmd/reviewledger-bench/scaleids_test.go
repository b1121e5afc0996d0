package main

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// Every form gives valid review IDs, one for each review and the same
// again for the same review: the UUIDs of their version and variant, the
// time-ordered ones sorting as they were submitted, the random ones not.
func TestScaleReviewIDs(t *testing.T) {
	cfg := loadConfig{Reviews: 20000, Span: 35 * 24 * time.Hour, End: time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)}
	for _, form := range idForms {
		cfg.IDs = form
		ids := make([]string, cfg.Reviews)
		seen := make(map[string]int, cfg.Reviews)
		for i := range ids {
			id := cfg.reviewID(i)
			if err := domain.ValidateReviewID(id); err != nil {
				t.Fatalf("%s: review %d: %v", form, i, err)
			}
			if j, ok := seen[id]; ok {
				t.Fatalf("%s: reviews %d and %d share the ID %s", form, j, i, id)
			}
			if again := cfg.reviewID(i); again != id {
				t.Fatalf("%s: review %d: %s, then %s", form, i, id, again)
			}
			seen[id], ids[i] = i, id
		}
		sorted := slices.IsSorted(ids)
		switch form {
		case idsNumber:
			if ids[7] != "scale-7" || sorted {
				t.Errorf("%s: %s, …, sorted %v: want scale-<i>, not in text order", form, ids[7], sorted)
			}
		case idsUUID4, idsUUID7:
			want := map[string]uuid.Version{idsUUID4: 4, idsUUID7: 7}[form]
			for _, id := range ids {
				u, err := uuid.Parse(id)
				if err != nil || u.Version() != want || u.Variant() != uuid.RFC4122 || id != strings.ToLower(id) {
					t.Fatalf("%s: %s: version %v, variant %v, %v", form, id, u.Version(), u.Variant(), err)
				}
			}
			if sorted != (form == idsUUID7) {
				t.Errorf("%s: sorted in submission order %v", form, sorted)
			}
		}
	}
	form7 := scaleReviewID(idsUUID7, 1, cfg.End)
	if ms, err := strconv.ParseInt(strings.ReplaceAll(form7[:13], "-", ""), 16, 64); err != nil || ms != cfg.End.UnixMilli() {
		t.Errorf("uuid7 at %s (%d ms): %s starts with %d ms (%v)", cfg.End, cfg.End.UnixMilli(), form7, ms, err)
	}
}

// The loader names each review it writes as the phases after it find it
// again (loadConfig.reviewID, as audit verify --review is sampled): the
// heads of a ledger grown with time-ordered UUIDs are exactly those of
// the reviews named so.
func TestGrowLedgerNamesTheReviewsThePhasesFind(t *testing.T) {
	pool := dbtest.Pool(t)
	ctx := context.Background()
	cfg := loadConfig{Reviews: 60, Waiting: 4, Span: 35 * 24 * time.Hour, End: time.Now().Add(-time.Hour), Writers: 8, Seed: 1, IDs: idsUUID7}
	if _, err := growLedger(ctx, pool, cfg); err != nil {
		t.Fatal(err)
	}
	want := make([]string, cfg.Reviews)
	for i := range want {
		want[i] = domain.StreamName(cfg.reviewID(i))
	}
	rows, err := pool.Query(ctx, `SELECT stream FROM event_stream WHERE stream LIKE 'review-%' ORDER BY stream`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("the ledger's review streams %q,\nwant the %d the phases name %q", got, len(want), want)
	}
}
