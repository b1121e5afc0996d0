package domain

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	storedjson "github.com/go-json-experiment/json/v1"
)

// Event type names. They are stored with every event and never change.
const (
	TypeSubmitted              = "Submitted"
	TypeAttemptStarted         = "AttemptStarted"
	TypeAttemptTimedOut        = "AttemptTimedOut"
	TypeFindingReceived        = "FindingReceived"
	TypeEscalated              = "Escalated"
	TypeManualApprovalRecorded = "ManualApprovalRecorded"
	TypeManualDecisionRecorded = "ManualDecisionRecorded"
	TypeRequeued               = "Requeued"
	TypeClaimed                = "Claimed"
	TypeClaimReleased          = "ClaimReleased"
	TypeHeld                   = "Held"
	TypeUnheld                 = "Unheld"
)

// SchemaVersion is the version of the events written by this code.
// Readers accept every version up to it. Versions are additive:
//
//   - 1: every Submitted holds its policy snapshot inline ("policy").
//   - 2: a Submitted names its snapshot by digest ("policy_digest") and the
//     snapshot is stored once, apart (the ledger resolves it on reading);
//     the event metadata is compact (the ledger's Metadata).
//   - 3: the bodies of the events every review writes are stored compact
//     where their fields allow (EncodeStored; DecodeStored reads either
//     form).
//   - 4: the event metadata is stored binary (the ledger's Metadata).
const SchemaVersion = 4

// Event is one fact in a review's history. Event bodies hold what a decision
// record needs and never the reviewed content.
type Event interface {
	EventType() string
}

// Submitted opens a review.
type Submitted struct {
	ReviewID      string `json:"review_id"`
	ContentClass  string `json:"content_class"`
	ContentType   string `json:"content_type"`
	PayloadDigest string `json:"payload_digest"` // "sha256:<hex>" of the content
	PayloadBytes  int    `json:"payload_bytes"`
	// Policy is the class's policy in force. A schema 1 body holds it
	// inline; a schema 2 body leaves it out and names it by PolicyDigest,
	// and the reader fills it in from the stored snapshot before the event
	// is applied (Apply checks the two agree).
	Policy       PolicySnapshot `json:"policy,omitzero"`
	PolicyDigest string         `json:"policy_digest,omitempty"` // PolicySnapshot.Digest of Policy

	SubmittedAt time.Time `json:"submitted_at"`
	Deadline    time.Time `json:"deadline"`
	SubmittedBy string    `json:"submitted_by,omitempty"`
}

// AttemptStarted is appended before each provider call.
type AttemptStarted struct {
	ReviewID          string    `json:"review_id"`
	Attempt           int       `json:"attempt"`
	AttemptTimeoutMS  int64     `json:"attempt_timeout_ms"`
	RemainingBudgetMS int64     `json:"remaining_budget_ms"`
	StartedAt         time.Time `json:"started_at"`
	// Provider names the provider called; left out for DefaultProvider,
	// so the attempts of a single-provider deployment read as before.
	Provider string `json:"provider,omitempty"`
	// Shadows names the shadow providers a review's first attempt was also
	// sent to (ShadowObserved records each one's answer); left out when
	// none, and on every later attempt.
	Shadows []string `json:"shadows,omitempty"`
}

// ProviderName returns the provider the attempt was sent to.
func (e AttemptStarted) ProviderName() string {
	if e.Provider == "" {
		return DefaultProvider
	}
	return e.Provider
}

// Classification says why an attempt produced no usable finding.
type Classification string

const (
	ClassDeadlineExceeded    Classification = "deadline_exceeded"
	ClassTransportError      Classification = "transport_error"
	ClassProviderUnavailable Classification = "provider_unavailable"
	ClassRateLimited         Classification = "rate_limited"
	ClassInvalidFinding      Classification = "invalid_finding"
	ClassProviderRefused     Classification = "provider_refused"
	ClassWorkerLost          Classification = "worker_lost"
	ClassCancelled           Classification = "cancelled"
	// ClassStoreUnavailable: the attempt was stopped because the ledger or
	// the work records could not be written for longer than its owner's
	// lease; recorded once the store is back.
	ClassStoreUnavailable Classification = "store_unavailable"
)

// Retryable reports whether an attempt that ended so may be retried: every
// classification but provider_refused (the provider answered a 4xx other
// than 429: asking again would get the same answer).
func (c Classification) Retryable() bool { return c != ClassProviderRefused }

// Recovery reports whether an attempt that ended so failed for a reason of
// our own (its worker was lost, the process shut down, the store was
// unavailable) rather than the provider's: retrying it is recovery, which
// the provider-wide retry budget neither refuses nor counts.
func (c Classification) Recovery() bool {
	return c == ClassWorkerLost || c == ClassCancelled || c == ClassStoreUnavailable
}

// AttemptTimedOut closes an attempt that produced no usable finding.
type AttemptTimedOut struct {
	ReviewID       string         `json:"review_id"`
	Attempt        int            `json:"attempt"`
	Classification Classification `json:"classification"`
	ElapsedMS      int64          `json:"elapsed_ms"`
	// Detail is a short diagnostic (status code, error class); never content.
	Detail       string    `json:"detail,omitempty"`
	RetryAfterMS int64     `json:"retry_after_ms,omitempty"`
	At           time.Time `json:"at"`
}

// Decision is a final or interim state a finding or moderator can give.
type Decision string

const (
	DecisionAccepted Decision = "accepted"
	DecisionRejected Decision = "rejected"
)

// Valid reports whether d is accepted or rejected.
func (d Decision) Valid() bool { return d == DecisionAccepted || d == DecisionRejected }

// FindingReceived records a complete structured finding for one attempt.
type FindingReceived struct {
	ReviewID   string    `json:"review_id"`
	Attempt    int       `json:"attempt"`
	State      Decision  `json:"state"`
	Reasons    []string  `json:"reasons"`
	Source     string    `json:"source"` // "response" or "callback"
	ElapsedMS  int64     `json:"elapsed_ms"`
	ReceivedAt time.Time `json:"received_at"`
}

// Finding returns the finding e records.
func (e FindingReceived) Finding() Finding {
	return Finding{ReviewID: e.ReviewID, Attempt: e.Attempt, State: e.State, Reasons: slices.Clone(e.Reasons)}
}

// EscalationReason says why a review left the automated path.
type EscalationReason string

const (
	ReasonAttemptsExhausted    EscalationReason = "attempts_exhausted"
	ReasonBudgetExhausted      EscalationReason = "budget_exhausted"
	ReasonDeadlinePassed       EscalationReason = "deadline_passed"
	ReasonProviderRefused      EscalationReason = "provider_refused"
	ReasonRetryBudgetExhausted EscalationReason = "retry_budget_exhausted"
	ReasonHumanGate            EscalationReason = "human_gate"
	ReasonCancelled            EscalationReason = "cancelled"
	// ReasonPayloadMissing: the content is not stored (purged, or lost to
	// a crash), so nothing can be sent to the provider: a moderator must
	// look at the review.
	ReasonPayloadMissing EscalationReason = "payload_missing"
)

// Escalated ends the automated path. State is manual_review, or rejected
// for a fail-closed class whose work was exhausted.
type Escalated struct {
	ReviewID string           `json:"review_id"`
	Reason   EscalationReason `json:"reason"`
	State    State            `json:"state"`
	Attempts int              `json:"attempts"`
	Detail   string           `json:"detail,omitempty"`
	At       time.Time        `json:"at"`
}

// ManualApprovalRecorded is one moderator's vote on a class that needs more
// than one approval; the decision follows when enough agree.
type ManualApprovalRecorded struct {
	ReviewID  string    `json:"review_id"`
	State     Decision  `json:"state"`
	Moderator string    `json:"moderator"`
	Note      string    `json:"note,omitempty"`
	At        time.Time `json:"at"`
}

// ManualDecisionRecorded is a moderator's decision on a manual_review item.
type ManualDecisionRecorded struct {
	ReviewID  string    `json:"review_id"`
	State     Decision  `json:"state"`
	Moderator string    `json:"moderator"`
	Note      string    `json:"note,omitempty"`
	Approvers []string  `json:"approvers,omitempty"`
	At        time.Time `json:"at"`
}

// Requeued sends a review in manual_review back to the automated path as a
// new round, with a fresh budget: the round's deadline is At plus the
// class's budget, its attempts are numbered on from the last one and the
// class's max_attempts applies to them.
type Requeued struct {
	ReviewID string    `json:"review_id"`
	By       string    `json:"by"`
	Note     string    `json:"note,omitempty"`
	Round    int       `json:"round"`
	Deadline time.Time `json:"deadline"`
	BudgetMS int64     `json:"budget_ms"`
	At       time.Time `json:"at"`
}

// Claimed is a moderator's lease on a review in manual_review, until
// ExpiresAt. The holder claiming again renews it.
type Claimed struct {
	ReviewID  string    `json:"review_id"`
	Moderator string    `json:"moderator"`
	ClaimedAt time.Time `json:"claimed_at"`
	ExpiresAt time.Time `json:"expires_at"`
}

// ReleaseReason says why a claim ended before a decision.
type ReleaseReason string

const (
	// ReleaseReleased: the holder (or an admin) gave the claim up.
	ReleaseReleased ReleaseReason = "released"
	// ReleaseExpired: the lease ran out and the system recorded it.
	ReleaseExpired ReleaseReason = "expired"
)

// ClaimReleased ends Moderator's claim. By is who released it (the holder,
// an admin, or "system" for an expired lease).
type ClaimReleased struct {
	ReviewID  string        `json:"review_id"`
	Moderator string        `json:"moderator"`
	By        string        `json:"by"`
	Reason    ReleaseReason `json:"reason"`
	At        time.Time     `json:"at"`
}

// Held puts a review in manual_review on hold with a note (waiting for
// someone outside the moderation team); it stays in manual_review.
type Held struct {
	ReviewID string    `json:"review_id"`
	By       string    `json:"by"`
	Note     string    `json:"note"`
	At       time.Time `json:"at"`
}

// Unheld takes a review off hold.
type Unheld struct {
	ReviewID string    `json:"review_id"`
	By       string    `json:"by"`
	At       time.Time `json:"at"`
}

func (Submitted) EventType() string              { return TypeSubmitted }
func (AttemptStarted) EventType() string         { return TypeAttemptStarted }
func (AttemptTimedOut) EventType() string        { return TypeAttemptTimedOut }
func (FindingReceived) EventType() string        { return TypeFindingReceived }
func (Escalated) EventType() string              { return TypeEscalated }
func (ManualApprovalRecorded) EventType() string { return TypeManualApprovalRecorded }
func (ManualDecisionRecorded) EventType() string { return TypeManualDecisionRecorded }
func (Requeued) EventType() string               { return TypeRequeued }
func (Claimed) EventType() string                { return TypeClaimed }
func (ClaimReleased) EventType() string          { return TypeClaimReleased }
func (Held) EventType() string                   { return TypeHeld }
func (Unheld) EventType() string                 { return TypeUnheld }

// Coordination reports whether e only coordinates the moderators working a
// review (a claim, its release, a hold, its end) without changing what
// they decide on: such events move the review's version but never make a
// moderator's expected_version stale.
func Coordination(e Event) bool {
	switch e.(type) {
	case Claimed, ClaimReleased, Held, Unheld:
		return true
	}
	return false
}

// EncodeEvent returns the stored body of e.
func EncodeEvent(e Event) ([]byte, error) {
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", e.EventType(), err)
	}
	return b, nil
}

// DecodeEvent rebuilds an event from its type name and stored body.
func DecodeEvent(typ string, data []byte) (Event, error) {
	var e Event
	switch typ {
	case TypeSubmitted:
		e = decodeInto[Submitted](data)
	case TypeAttemptStarted:
		e = decodeInto[AttemptStarted](data)
	case TypeAttemptTimedOut:
		e = decodeInto[AttemptTimedOut](data)
	case TypeFindingReceived:
		e = decodeInto[FindingReceived](data)
	case TypeEscalated:
		e = decodeInto[Escalated](data)
	case TypeManualApprovalRecorded:
		e = decodeInto[ManualApprovalRecorded](data)
	case TypeManualDecisionRecorded:
		e = decodeInto[ManualDecisionRecorded](data)
	case TypeRequeued:
		e = decodeInto[Requeued](data)
	case TypeClaimed:
		e = decodeInto[Claimed](data)
	case TypeClaimReleased:
		e = decodeInto[ClaimReleased](data)
	case TypeHeld:
		e = decodeInto[Held](data)
	case TypeUnheld:
		e = decodeInto[Unheld](data)
	case TypeConflictingCompletionRecorded:
		e = decodeInto[ConflictingCompletionRecorded](data)
	case TypeShadowObserved:
		e = decodeInto[ShadowObserved](data)
	default:
		return nil, fmt.Errorf("decode event: unknown type %q: %w", typ, ErrCorruptHistory)
	}
	if err, ok := e.(decodeError); ok {
		return nil, fmt.Errorf("decode %s: %v: %w", typ, err.err, ErrCorruptHistory)
	}
	return e, nil
}

type decodeError struct{ err error }

func (decodeError) EventType() string { return "" }

func decodeInto[T Event](data []byte) Event {
	// json.Unmarshal takes "null" as no change, which would give a zero
	// event; a stored body is always an object.
	if body := bytes.TrimLeft(data, " \t\r\n"); len(body) == 0 || body[0] != '{' {
		return decodeError{errors.New("body is not a JSON object")}
	}
	var v T
	if err := storedjson.Unmarshal(data, &v); err != nil {
		return decodeError{err}
	}
	return v
}
