// Package work is the port between the review engine and its storage: the
// work record every review on the automated path has (who holds it, until
// when, when it is next due), the reviewed content, and the callback
// deliveries seen. Adapters: pgwork (PostgreSQL) and memwork (memory, for
// tests); worktest is the conformance suite both pass.
//
// A work record is created with the review's Submitted event and deleted
// with its last automated event, through the ledger: the adapters'
// Committer applies a Change given as the effect of a ledger append
// (ledger.Commands, ledger.Ledger.Write) if and only if the append is written.
package work

import (
	"context"
	"errors"
	"time"

	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

// Record is a review's work record.
type Record struct {
	ReviewID string
	Deadline time.Time
	// DueAt is when the review is next to be worked.
	DueAt time.Time
	// Owner is the process holding the review, "" when none does;
	// LeaseUntil is when its hold ends unless renewed.
	Owner      string
	LeaseUntil time.Time
	// Awaiting is the attempt whose provider accepted it for asynchronous
	// review (202) and whose callback the review waits for; 0 when none.
	Awaiting int
}

// Payload is a review's stored content.
type Payload = ledger.Payload

// Claimed is a record taken by a Claim, with the review's content (nil
// when none is stored).
type Claimed struct {
	Record
	Payload *Payload
}

// Op is what a Change does to a work record.
type Op = ledger.WorkOp

// The ops of a Change (ledger.WorkOp).
const (
	// Keep leaves the record as it is (an attempt starting under a lease).
	Keep = ledger.WorkKeep
	// Create stores the content and the record of a review being created.
	Create = ledger.WorkCreate
	// Park gives up the owner's lease and makes the record due at Until,
	// awaiting a callback for attempt Awaiting when that is not 0.
	Park = ledger.WorkPark
	// Release deletes the record: the review left the automated path.
	Release = ledger.WorkRelease
	// Reopen writes the record of a review a moderator sent back to the
	// automated path (Requeued), due at At with the round's Deadline.
	Reopen = ledger.WorkReopen
)

// Change is the effect on its work record of an append to a review's
// stream, given with a ledger.Step or to ledger.CreateWith: the ledger's
// typed effect, applied by the Store's Committer.
type Change = ledger.WorkChange

// Query selects the records a Claim takes: due at Now (DueAt not after
// it) and not held by a live lease (none, or one that ended before Now).
type Query struct {
	Owner      string    // who takes them
	LeaseUntil time.Time // the lease given
	Now        time.Time
	// IDs limits the claim to these reviews; none means any.
	IDs []string
	// Limit bounds how many are taken; 0 means no bound with IDs.
	Limit int
	// DeadlineBefore limits the claim to reviews whose deadline is before
	// it, due or not (the deadline sweeper); zero means any.
	DeadlineBefore time.Time
}

// Errors of the port.
var (
	// ErrPayloadMissing: no content is stored for the review.
	ErrPayloadMissing = errors.New("payload missing")
)

// Delivery outcomes stored with a callback's webhook-id.
const (
	DeliveryApplied  = "applied"
	DeliveryConflict = "conflict"
	DeliveryInvalid  = "invalid"
)

// Store is the engine's storage. Times are the engine's clock, passed in.
// Implementations are safe for concurrent use.
type Store interface {
	// Committer writes ledger appends with their Change effects; the
	// engine's ledger is built on it.
	ledger.Committer
	// Atomic reports whether a Change is applied in the same transaction
	// as its append. Only then may a Create name an owner: otherwise the
	// record is written before the stream (so a stream never exists
	// without its record) and must be claimed like any other.
	Atomic() bool

	// Claim takes the records q selects, oldest due first, skipping those
	// another process is taking at the same moment, and gives them to
	// q.Owner until q.LeaseUntil.
	Claim(ctx context.Context, q Query) ([]Claimed, error)
	// Renew extends to until owner's leases of the named records, and
	// returns the IDs of those it extended and of those owner still holds.
	// A record being written at the moment (its review's step committing)
	// is held but may be left unextended rather than waited for, so that a
	// renewal never holds up the work it renews.
	Renew(ctx context.Context, owner string, reviewIDs []string, until time.Time) (renewed, held []string, err error)
	// Park makes a record owner holds due at until, with no owner,
	// awaiting a callback for attempt awaiting (0: none). Nothing happens
	// when owner does not hold it.
	Park(ctx context.Context, owner, reviewID string, until time.Time, awaiting int) error
	// Release gives up owner's leases of the named records (every record
	// owner holds when reviewIDs is nil), which are due at once for
	// whoever takes them.
	Release(ctx context.Context, owner string, reviewIDs []string, now time.Time) error
	// Ensure makes sure a review on the automated path has a record, due
	// at now when it had none; it reports whether it created one.
	Ensure(ctx context.Context, reviewID string, deadline, now time.Time) (bool, error)
	// Done deletes a review's record: it is no longer on the automated path.
	Done(ctx context.Context, reviewID string) error
	// Count returns how many reviews have records: the work still owed.
	Count(ctx context.Context) (int, error)

	// Payload returns a review's stored content, ErrPayloadMissing when
	// none is stored.
	Payload(ctx context.Context, reviewID string) (Payload, error)
	// PurgePayloads deletes content stored before cutoff whose review has
	// no record, and returns how many it deleted.
	PurgePayloads(ctx context.Context, cutoff time.Time) (int64, error)

	// SeeDelivery records a callback delivery: its webhook-id for a
	// review. When the same delivery was seen before it returns false and
	// the outcome stored ("" while the first one is processed, or when its
	// outcome could not be stored).
	SeeDelivery(ctx context.Context, webhookID, reviewID string, now time.Time) (first bool, outcome string, err error)
	// SetDeliveryOutcome stores what became of a delivery.
	SetDeliveryOutcome(ctx context.Context, webhookID, reviewID, outcome string) error
	// ForgetDelivery removes a delivery whose processing failed before it
	// had an outcome, so a redelivery is processed again.
	ForgetDelivery(ctx context.Context, webhookID, reviewID string) error
	// PurgeDeliveries deletes deliveries received before cutoff.
	PurgeDeliveries(ctx context.Context, cutoff time.Time) error
}
