package audit

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

// A signed checkpoint is a statement, signed with the service's Ed25519
// audit key, of how far review streams reached and what they held: for
// each review whose stream grew since the previous checkpoint, its head
// (last revision and that event's chain hash) and a digest of what auditors
// are shown of every event up to the head that the chain hash does not
// cover (ViewDigest). Each checkpoint names the digest of the one before,
// so that they form a chain of their own.
//
// Whoever can write the database can rewrite a review and recompute its
// hash chain and its unsigned anchors, but cannot sign: a rewrite of any
// event up to a signed head is found by `audit verify --public-key`.
//
// The body is plain text, one field per line, so that it can be read,
// exported and checked with other tools:
//
//	reviewledger audit checkpoint v1
//	seq 12
//	signed_at 2026-12-01T10:00:00.123456Z
//	key 3f9a0c1d2e4b5a69
//	prev 5c2d…(hex SHA-256 of checkpoint 11's body, "none" for the first)
//	position 5829/17
//	head r-1 4 9b1c…(chain hash) 07aa…(view digest)
//	head r-2 7 …
//
// The signature is Ed25519 over the body's bytes.

// checkpointMagic is the first line of a version 1 body.
const checkpointMagic = "reviewledger audit checkpoint v1"

// ErrBadCheckpoint is wrapped by errors reading a checkpoint body.
var ErrBadCheckpoint = errors.New("malformed audit checkpoint")

// Head is a review stream as a signed checkpoint saw it.
type Head struct {
	ReviewID string
	Revision uint64
	Hash     string // the chain hash of the event at Revision
	Digest   string // ViewDigest through Revision
}

// Checkpoint is one signed statement.
type Checkpoint struct {
	Seq      int64
	SignedAt time.Time
	KeyID    string
	// Prev is the digest of the previous checkpoint's body, "" for the
	// first.
	Prev string
	// Position is the ledger's global position the checkpoint covers
	// through: the next one starts after it.
	Position eventstore.Position
	Heads    []Head // in review ID order
}

// Body is the checkpoint's signed bytes.
func (c Checkpoint) Body() []byte {
	var b bytes.Buffer
	prev := c.Prev
	if prev == "" {
		prev = "none"
	}
	fmt.Fprintf(&b, "%s\nseq %d\nsigned_at %s\nkey %s\nprev %s\nposition %d/%d\n", checkpointMagic, c.Seq,
		c.SignedAt.UTC().Format(time.RFC3339Nano), c.KeyID, prev, c.Position.Commit, c.Position.Prepare)
	for _, h := range c.Heads {
		fmt.Fprintf(&b, "head %s %d %s %s\n", h.ReviewID, h.Revision, h.Hash, h.Digest)
	}
	return b.Bytes()
}

// Digest identifies a body: the hex SHA-256 of its bytes. The next
// checkpoint names it as its Prev.
func Digest(body []byte) string {
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:])
}

// ParseCheckpoint reads a body written by Body. Errors wrap
// ErrBadCheckpoint.
func ParseCheckpoint(body []byte) (Checkpoint, error) {
	var c Checkpoint
	lines := strings.Split(strings.TrimSuffix(string(body), "\n"), "\n")
	bad := func(format string, args ...any) (Checkpoint, error) {
		return Checkpoint{}, fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrBadCheckpoint)
	}
	if len(lines) < 6 || lines[0] != checkpointMagic {
		return bad("not a version 1 checkpoint")
	}
	field := func(i int, name string) (string, bool) {
		v, ok := strings.CutPrefix(lines[i], name+" ")
		return v, ok
	}
	var err error
	if v, ok := field(1, "seq"); !ok {
		return bad("line 2: want seq")
	} else if c.Seq, err = strconv.ParseInt(v, 10, 64); err != nil || c.Seq < 1 {
		return bad("line 2: seq %q", v)
	}
	if v, ok := field(2, "signed_at"); !ok {
		return bad("line 3: want signed_at")
	} else if c.SignedAt, err = time.Parse(time.RFC3339Nano, v); err != nil {
		return bad("line 3: signed_at %q", v)
	}
	if v, ok := field(3, "key"); !ok || v == "" {
		return bad("line 4: want key")
	} else {
		c.KeyID = v
	}
	if v, ok := field(4, "prev"); !ok || v == "" {
		return bad("line 5: want prev")
	} else if v != "none" {
		c.Prev = v
	}
	if v, ok := field(5, "position"); !ok {
		return bad("line 6: want position")
	} else if commit, prepare, ok := strings.Cut(v, "/"); !ok {
		return bad("line 6: position %q", v)
	} else if c.Position.Commit, err = strconv.ParseUint(commit, 10, 64); err != nil {
		return bad("line 6: position %q", v)
	} else if c.Position.Prepare, err = strconv.ParseUint(prepare, 10, 64); err != nil {
		return bad("line 6: position %q", v)
	}
	for i, l := range lines[6:] {
		f := strings.Fields(l)
		if len(f) != 5 || f[0] != "head" || domain.ValidateReviewID(f[1]) != nil {
			return bad("line %d: want head REVIEW REVISION HASH DIGEST", i+7)
		}
		rev, err := strconv.ParseUint(f[2], 10, 64)
		if err != nil {
			return bad("line %d: revision %q", i+7, f[2])
		}
		c.Heads = append(c.Heads, Head{ReviewID: f[1], Revision: rev, Hash: f[3], Digest: f[4]})
	}
	if !slices.IsSortedFunc(c.Heads, func(a, b Head) int { return strings.Compare(a.ReviewID, b.ReviewID) }) {
		return bad("heads not in review ID order")
	}
	if !bytes.Equal(c.Body(), body) {
		return bad("not in canonical form")
	}
	return c, nil
}

// Sign returns the body of c and its signature with key. c.KeyID must be
// the key's ID.
func Sign(c Checkpoint, key ed25519.PrivateKey) (body, sig []byte) {
	body = c.Body()
	return body, ed25519.Sign(key, body)
}

// ViewDigest is the hex SHA-256 of what auditors are shown of a review's
// events 0 to through that the chain hash does not cover: for each event
// its chain hash (which covers the stream, revision, type, actor and body,
// and the events before), the time the store recorded it (recorded_at),
// the request ID and the metadata schema, each length-prefixed. A change
// to any of them, or to the chain, changes the digest.
func ViewDigest(h *ledger.History, through uint64) string {
	d := sha256.New()
	for _, e := range h.Events {
		if e.Revision > through {
			break
		}
		for _, part := range []string{e.Metadata.Hash, e.RecordedAt.UTC().Format(time.RFC3339Nano), e.Metadata.RequestID, strconv.Itoa(e.Metadata.Schema)} {
			d.Write([]byte(strconv.Itoa(len(part))))
			d.Write([]byte{':'})
			d.Write([]byte(part))
		}
	}
	return hex.EncodeToString(d.Sum(nil))
}
