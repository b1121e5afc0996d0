package main

import (
	"encoding/binary"
	"fmt"
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
	for _, f := range idForms {
		if form == f {
			return nil
		}
	}
	return fmt.Errorf("-ids: must be one of %s, got %q", strings.Join(idForms, ", "), form)
}

// scaleReviewID is the ID of review i, submitted at at, in form. It is a
// function of its arguments alone, so that a phase after the growth finds
// any review's ID again (loadConfig.reviewID).
func scaleReviewID(form string, i int, at time.Time) string {
	if form != idsUUID4 && form != idsUUID7 {
		return fmt.Sprintf("scale-%d", i)
	}
	var b uuid.UUID
	binary.BigEndian.PutUint64(b[:8], mix64(uint64(i)))
	binary.BigEndian.PutUint64(b[8:], mix64(^uint64(i)))
	version := byte(0x40)
	if form == idsUUID7 {
		ms := uint64(at.UnixMilli()) << 16 // 48 bits of milliseconds first
		binary.BigEndian.PutUint64(b[:8], ms|uint64(b[6])<<8|uint64(b[7]))
		version = 0x70
	}
	b[6] = version | b[6]&0x0f
	b[8] = 0x80 | b[8]&0x3f // the RFC 9562 variant
	return b.String()
}

// mix64 is SplitMix64's finalizer: distinct inputs give distinct,
// evenly spread outputs.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}
