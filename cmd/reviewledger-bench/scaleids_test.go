package main

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/reviewledger/reviewledger/domain"
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
			for _, id := range ids[:100] {
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
