package main

import (
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
)

// The forms of the grown ledger's review IDs (-ids). What a review takes
// on disk depends on its ID: every event row names its stream
// (review-<ID>), and the heads, the summaries and the content are keyed by
// it, in B-tree indexes whose pages fill according to the order in which
// their keys arrive.
const (
	// idsNumber, the default: scale-<i>, short and increasing, but not in
	// text order (scale-10 sorts before scale-9), so new keys go in at
	// several places of an index, each page filled to about half as it
	// splits.
	idsNumber = "number"
	// idsUUID4: random UUIDs (version 4), 36 characters arriving in no
	// order.
	idsUUID4 = "uuid4"
	// idsUUID7: time-ordered UUIDs (version 7), 36 characters, each after
	// the ones submitted before it.
	idsUUID7 = "uuid7"
)

// idForms are the values of -ids.
var idForms = []string{idsNumber, idsUUID4, idsUUID7}

// validIDForm reports a -ids value that is not one of idForms.
func validIDForm(form string) error {
	if slices.Contains(idForms, form) {
		return nil
	}
	return fmt.Errorf("-ids: must be one of %s, got %q", strings.Join(idForms, ", "), form)
}

// scaleReviewID is the ID of review i, submitted at at, in form. It is a
// function of its arguments alone, so that a phase after the growth finds
// any review's ID again (loadConfig.reviewID). A UUID's random bits are
// those of a name-based UUID of scale-<i> (SHA-256); a time-ordered one
// has the submission's Unix milliseconds in its first 48 bits.
func scaleReviewID(form string, i int, at time.Time) string {
	name := fmt.Sprintf("scale-%d", i)
	switch form {
	case idsUUID4:
		return uuid.NewHash(sha256.New(), uuid.NameSpaceOID, []byte(name), 4).String()
	case idsUUID7:
		u := uuid.NewHash(sha256.New(), uuid.NameSpaceOID, []byte(name), 7)
		ms := uint64(at.UnixMilli())
		for k := range 6 {
			u[k] = byte(ms >> (40 - 8*k))
		}
		return u.String()
	}
	return name
}
