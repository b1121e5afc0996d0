package ledger

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"

	"github.com/reviewledger/reviewledger/domain"
)

// chainHash is the SHA-256 of the previous event's hash and this event's
// canonical bytes: stream, revision, type, actor and the stored body, each
// length-prefixed so no two different events share an input.
func chainHash(prev, stream string, rev uint64, typ string, data []byte, actor string) string {
	var num [20]byte
	revision := strconv.AppendUint(num[:0], rev, 10)
	in := make([]byte, 0, len(prev)+len(stream)+len(revision)+len(typ)+len(actor)+len(data)+6*8)
	in = appendPart(in, prev)
	in = appendPart(in, stream)
	in = appendPart(in, revision)
	in = appendPart(in, typ)
	in = appendPart(in, actor)
	in = appendPart(in, data)
	sum := sha256.Sum256(in)
	var out [2 * sha256.Size]byte
	hex.Encode(out[:], sum[:])
	return string(out[:])
}

// appendPart appends one part of a hash's input: its length in decimal, a
// colon, the part.
func appendPart[T string | []byte](in []byte, part T) []byte {
	in = strconv.AppendInt(in, int64(len(part)), 10)
	in = append(in, ':')
	return append(in, part...)
}

// ErrTampered reports a history whose hash chain does not hold.
var ErrTampered = errors.New("history altered")

// ChainError says where a review's hash chain breaks.
type ChainError struct {
	ReviewID string
	Revision uint64
	Reason   string
}

func (e *ChainError) Error() string {
	return fmt.Sprintf("review %q revision %d: %s", e.ReviewID, e.Revision, e.Reason)
}
func (e *ChainError) Unwrap() error { return ErrTampered }

// Verify checks the history's revisions are contiguous from 0 and every
// event's hash chains onto the one before. It returns a *ChainError matching
// ErrTampered at the first break.
func (h *History) Verify() error {
	return verifyChain(h.ReviewID, domain.StreamName(h.ReviewID), h.Events)
}

// verifyChain checks events read from stream, in revision order.
func verifyChain(reviewID, stream string, events []Entry) error {
	prev := ""
	for i, e := range events {
		if e.Revision != uint64(i) {
			return &ChainError{ReviewID: reviewID, Revision: e.Revision, Reason: fmt.Sprintf("revision %d found where %d belongs (event removed or reordered)", e.Revision, i)}
		}
		if e.Metadata.PrevHash != prev {
			return &ChainError{ReviewID: reviewID, Revision: e.Revision, Reason: "does not chain onto the event before it (event removed, inserted or reordered)"}
		}
		want := chainHash(prev, stream, e.Revision, e.Type, e.Data, e.Metadata.Actor)
		if e.Metadata.Hash != want {
			return &ChainError{ReviewID: reviewID, Revision: e.Revision, Reason: "content does not match its hash (event altered)"}
		}
		prev = e.Metadata.Hash
	}
	return nil
}
