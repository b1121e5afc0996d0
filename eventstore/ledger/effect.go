package ledger

import "time"

// WorkChange is what an append does to its review's work record (the
// record every review on the automated path has: who holds it, until
// when, when it is next due) and to its stored content: the one effect a
// Committer applies with a stream's append, if and only if the append is
// written. The engine's work port (package api/engine/work) names these
// types Change, Op and Payload and its adapters apply them.
type WorkChange struct {
	Op       WorkOp
	ReviewID string
	// Owner: for WorkCreate the process that holds the new review ("":
	// none); for WorkPark the owner giving up its lease (nothing changes
	// when another holds the record).
	Owner string
	// WorkCreate: the deadline, the content, when it is stored, and for an
	// owned record the lease's end. WorkReopen: the deadline and At.
	Deadline   time.Time
	Payload    Payload
	At         time.Time
	LeaseUntil time.Time
	// WorkPark: when the record is due again and the attempt awaited.
	Until    time.Time
	Awaiting int
}

// WorkOp is what a WorkChange does to a work record.
type WorkOp int

const (
	// WorkKeep leaves the record as it is (an attempt starting under a
	// lease).
	WorkKeep WorkOp = iota
	// WorkCreate stores the content and the record of a review being
	// created.
	WorkCreate
	// WorkPark gives up the owner's lease and makes the record due at
	// Until, awaiting a callback for attempt Awaiting when that is not 0.
	WorkPark
	// WorkRelease deletes the record: the review left the automated path.
	WorkRelease
	// WorkReopen writes the record of a review a moderator sent back to
	// the automated path (Requeued): due at At, with the round's Deadline
	// and no owner. The content is the one stored at creation.
	WorkReopen
)

// Payload is a review's stored content.
type Payload struct {
	Digest      string // "sha256:<hex>", as the Submitted event records it
	ContentType string
	Content     []byte
}
