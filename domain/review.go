package domain

import (
	"fmt"
	"slices"
	"time"
)

// State is where a review stands.
type State string

const (
	StatePending      State = "pending"
	StateAccepted     State = "accepted"
	StateRejected     State = "rejected"
	StateManualReview State = "manual_review"
)

// Terminal reports whether no event may change s.
func (s State) Terminal() bool { return s == StateAccepted || s == StateRejected }

// Review is the aggregate: a review's state rebuilt from its events. Its
// zero value is a review that does not exist yet. Change it only through
// Apply; the commands in this package return the events to apply.
type Review struct {
	id            string
	class         string
	contentType   string
	payloadDigest string
	policy        ClassPolicy
	state         State
	version       uint64
	exists        bool

	submittedAt time.Time
	deadline    time.Time
	decidedAt   time.Time
	decidedBy   string
	// decidingProvider is the provider whose finding decided the review;
	// "" unless decidedBy is "provider".
	decidingProvider string
	reasons          []string

	attempts         int    // attempts started
	inFlight         int    // attempt number in flight, 0 when none
	inFlightRevision uint64 // revision of the in-flight AttemptStarted
	inFlightStarted  time.Time
	inFlightTimeout  time.Duration
	inFlightProvider string
	inFlightShadows  []string
	// tried names the providers the current round has sent attempts to.
	tried []string

	// lastFailure is how the latest attempt that ended without a finding
	// ended: what a retry waits from.
	lastFailure Failure

	escalationReason EscalationReason
	escalatedAt      time.Time
	approvals        map[Decision][]string // moderator names per vote

	// gateHeld is set between an automated accept on a human-gated class
	// and the Escalated event that must follow it.
	gateHeld bool

	// round is the automated round, 1 plus one per Requeued; roundBase
	// is how many attempts earlier rounds made.
	round     int
	roundBase int
	// settled is the revision of the latest event that is not a
	// coordination event (Coordination): the oldest version a moderator
	// may still act on.
	settled uint64
	claim   *ClaimState
	hold    *HoldState
}

// ClaimState is the claim a review in manual_review carries: Moderator's
// since Since, until ExpiresAt (renewals move ExpiresAt only).
type ClaimState struct {
	Moderator string
	Since     time.Time
	ExpiresAt time.Time
}

// Live reports whether the claim's lease has not ended at now.
func (c *ClaimState) Live(now time.Time) bool { return c != nil && now.Before(c.ExpiresAt) }

// HoldState is a hold on a review in manual_review.
type HoldState struct {
	By   string
	Note string
	At   time.Time
}

// Rehydrate rebuilds a review from its events in revision order, the first
// at revision 0.
func Rehydrate(events []Event) (*Review, error) {
	r := &Review{}
	for i, e := range events {
		if err := r.Apply(uint64(i), e); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Apply moves the review forward by the event stored at revision rev. It
// refuses events that could not legally follow the current state, so a
// tampered or misordered history fails to load instead of producing a
// plausible review.
func (r *Review) Apply(rev uint64, e Event) error {
	if want := r.nextRevision(); rev != want {
		return fmt.Errorf("%s at revision %d, expected %d: %w", e.EventType(), rev, want, ErrCorruptHistory)
	}
	if err := r.apply(e); err != nil {
		return fmt.Errorf("%s at revision %d: %w: %w", e.EventType(), rev, err, ErrCorruptHistory)
	}
	if !Coordination(e) {
		r.settled = rev
	}
	r.version = rev
	r.exists = true
	return nil
}

func (r *Review) nextRevision() uint64 {
	if !r.exists {
		return 0
	}
	return r.version + 1
}

func (r *Review) apply(e Event) error {
	if _, ok := e.(Submitted); !ok && !r.exists {
		return fmt.Errorf("review not submitted")
	}
	if id, ok := reviewIDOf(e); ok && r.exists && id != r.id {
		return fmt.Errorf("event of review %q in the history of %q", id, r.id)
	}
	if esc, ok := e.(Escalated); r.gateHeld && (!ok || esc.Reason != ReasonHumanGate || esc.State != StateManualReview) {
		return fmt.Errorf("an accept held by the human gate must be escalated to manual_review first")
	}
	switch e := e.(type) {
	case Submitted:
		if r.exists {
			return fmt.Errorf("review submitted twice")
		}
		if e.PolicyDigest != "" && e.Policy.Digest() != e.PolicyDigest {
			return fmt.Errorf("policy snapshot does not match its digest %s (not resolved, or altered)", e.PolicyDigest)
		}
		r.id, r.class, r.contentType = e.ReviewID, e.ContentClass, e.ContentType
		r.payloadDigest = e.PayloadDigest
		r.policy = e.Policy.ClassPolicy()
		r.state = StatePending
		r.submittedAt, r.deadline = e.SubmittedAt, e.Deadline
		r.round = 1
	case AttemptStarted:
		if r.state != StatePending || r.inFlight != 0 || e.Attempt != r.attempts+1 || e.Attempt-r.roundBase > r.policy.MaxAttempts {
			return fmt.Errorf("attempt %d cannot start", e.Attempt)
		}
		r.attempts = e.Attempt
		r.inFlight = e.Attempt
		r.inFlightRevision = r.nextRevision()
		r.inFlightStarted = e.StartedAt
		r.inFlightTimeout = time.Duration(e.AttemptTimeoutMS) * time.Millisecond
		r.inFlightProvider = e.ProviderName()
		r.inFlightShadows = e.Shadows
		if !slices.Contains(r.tried, r.inFlightProvider) {
			r.tried = append(r.tried, r.inFlightProvider)
		}
	case AttemptTimedOut:
		if r.state != StatePending || r.inFlight == 0 || e.Attempt != r.inFlight {
			return fmt.Errorf("attempt %d is not in flight", e.Attempt)
		}
		r.inFlight = 0
		r.lastFailure = Failure{Attempt: e.Attempt, Provider: r.inFlightProvider, Classification: e.Classification, Detail: e.Detail, At: e.At,
			RetryAfter: time.Duration(e.RetryAfterMS) * time.Millisecond}
	case FindingReceived:
		if r.state != StatePending || r.inFlight == 0 || e.Attempt != r.inFlight || !e.State.Valid() {
			return fmt.Errorf("finding for attempt %d does not apply", e.Attempt)
		}
		r.inFlight = 0
		r.reasons = slices.Clone(e.Reasons)
		if HeldByGate(r.policy.HumanGate, e.State) {
			// The Escalated event that follows moves it to manual_review.
			r.gateHeld = true
			return nil
		}
		r.state = State(e.State)
		r.decidedAt = e.ReceivedAt
		r.decidedBy = "provider"
		r.decidingProvider = r.inFlightProvider
	case Escalated:
		if r.state != StatePending {
			return fmt.Errorf("escalation of a %s review", r.state)
		}
		if e.State != StateManualReview && e.State != StateRejected {
			return fmt.Errorf("escalation to %q", e.State)
		}
		if e.State == StateRejected && !r.mayFailClosed(e.Reason) {
			return fmt.Errorf("%s escalation to rejected on a class that does not fail closed for it", e.Reason)
		}
		r.gateHeld = false
		r.inFlight = 0
		r.state = e.State
		r.escalationReason = e.Reason
		r.escalatedAt = e.At
		if e.State == StateRejected {
			r.decidedAt = e.At
			r.decidedBy = "policy"
			r.reasons = []string{"fail_closed:" + string(e.Reason)}
		}
	case ManualApprovalRecorded:
		if r.state != StateManualReview || !e.State.Valid() || r.approved(e.Moderator) ||
			len(r.approvals[e.State])+1 >= r.policy.RequiredApprovals() {
			return fmt.Errorf("approval by %q does not apply", e.Moderator)
		}
		if r.approvals == nil {
			r.approvals = make(map[Decision][]string)
		}
		r.approvals[e.State] = append(r.approvals[e.State], e.Moderator)
		if r.claim != nil && r.claim.Moderator == e.Moderator {
			r.claim = nil // the voter's turn is over: the next approver claims
		}
	case ManualDecisionRecorded:
		if r.state != StateManualReview || !e.State.Valid() || r.approved(e.Moderator) || !r.agreed(e) {
			return fmt.Errorf("decision by %q does not apply", e.Moderator)
		}
		r.state = State(e.State)
		r.decidedAt = e.At
		r.decidedBy = e.Moderator
		if e.Note != "" {
			r.reasons = []string{e.Note}
		}
		r.claim, r.hold = nil, nil
	default:
		return r.applyModeration(e)
	}
	return nil
}

// applyModeration applies the events of a moderation team working the
// queue: requeues, claims and holds.
func (r *Review) applyModeration(e Event) error {
	switch e := e.(type) {
	case Requeued:
		if r.state != StateManualReview || e.Round != r.round+1 || !e.Deadline.After(e.At) {
			return fmt.Errorf("requeue to round %d does not apply", e.Round)
		}
		r.state = StatePending
		r.round = e.Round
		r.roundBase = r.attempts
		r.deadline = e.Deadline
		r.lastFailure = Failure{}
		r.escalationReason, r.escalatedAt = "", time.Time{}
		r.approvals = nil
		r.reasons = nil
		r.claim, r.hold = nil, nil
	case Claimed:
		if r.state != StateManualReview || e.Moderator == "" || !e.ExpiresAt.After(e.ClaimedAt) ||
			(r.claim.Live(e.ClaimedAt) && r.claim.Moderator != e.Moderator) {
			return fmt.Errorf("claim by %q does not apply", e.Moderator)
		}
		since := e.ClaimedAt
		if r.claim.Live(e.ClaimedAt) {
			since = r.claim.Since // a renewal
		}
		r.claim = &ClaimState{Moderator: e.Moderator, Since: since, ExpiresAt: e.ExpiresAt}
	case ClaimReleased:
		if r.state != StateManualReview || r.claim == nil || r.claim.Moderator != e.Moderator ||
			(e.Reason != ReleaseReleased && e.Reason != ReleaseExpired) ||
			(e.Reason == ReleaseExpired && r.claim.Live(e.At)) {
			return fmt.Errorf("release of %q's claim does not apply", e.Moderator)
		}
		r.claim = nil
	case Held:
		if r.state != StateManualReview || r.hold != nil || e.Note == "" {
			return fmt.Errorf("hold does not apply")
		}
		r.hold = &HoldState{By: e.By, Note: e.Note, At: e.At}
	case Unheld:
		if r.state != StateManualReview || r.hold == nil {
			return fmt.Errorf("unhold of a review not on hold")
		}
		r.hold = nil
	default:
		return fmt.Errorf("unknown event %T", e)
	}
	return nil
}

// failsClosed reports whether an escalation for reason rejects the review
// instead of queueing it: only the exhaustion of a fail-closed class's own
// budget or attempts does. Everything else that ends the automated path (a
// provider refusing the request, the provider-wide retry budget, a human
// gate, a cancellation) goes to a moderator: a provider fault such as a
// rotated credential must never reject content wholesale.
func (r *Review) failsClosed(reason EscalationReason) bool {
	switch reason {
	case ReasonAttemptsExhausted, ReasonBudgetExhausted, ReasonDeadlinePassed:
		return r.policy.OnExhaustion == ExhaustToRejected
	}
	return false
}

// mayFailClosed reports whether a stored escalation to rejected is
// consistent with the class. It accepts every reason but a human gate or a
// cancellation on a fail-closed class, as histories written before
// failsClosed was narrowed did: events are forever.
func (r *Review) mayFailClosed(reason EscalationReason) bool {
	switch reason {
	case ReasonHumanGate, ReasonCancelled:
		return false
	}
	return r.policy.OnExhaustion == ExhaustToRejected
}

// agreed reports whether a manual decision carries the votes its class
// needs: on a class needing n approvals, the n-1 moderators who already
// voted for the same state, in order, then the deciding moderator.
func (r *Review) agreed(e ManualDecisionRecorded) bool {
	if r.policy.RequiredApprovals() == 1 {
		return true
	}
	prior := r.approvals[e.State]
	return len(prior)+1 >= r.policy.RequiredApprovals() &&
		slices.Equal(e.Approvers, append(slices.Clone(prior), e.Moderator))
}

func reviewIDOf(e Event) (string, bool) {
	switch e := e.(type) {
	case Submitted:
		return e.ReviewID, true
	case AttemptStarted:
		return e.ReviewID, true
	case AttemptTimedOut:
		return e.ReviewID, true
	case FindingReceived:
		return e.ReviewID, true
	case Escalated:
		return e.ReviewID, true
	case ManualApprovalRecorded:
		return e.ReviewID, true
	case ManualDecisionRecorded:
		return e.ReviewID, true
	case Requeued:
		return e.ReviewID, true
	case Claimed:
		return e.ReviewID, true
	case ClaimReleased:
		return e.ReviewID, true
	case Held:
		return e.ReviewID, true
	case Unheld:
		return e.ReviewID, true
	}
	return "", false
}

func (r *Review) approved(moderator string) bool {
	for _, names := range r.approvals {
		if slices.Contains(names, moderator) {
			return true
		}
	}
	return false
}

// Accessors for read models and views.

func (r *Review) Exists() bool           { return r.exists }
func (r *Review) ID() string             { return r.id }
func (r *Review) Class() string          { return r.class }
func (r *Review) ContentType() string    { return r.contentType }
func (r *Review) PayloadDigest() string  { return r.payloadDigest }
func (r *Review) Policy() ClassPolicy    { return r.policy }
func (r *Review) State() State           { return r.state }
func (r *Review) Version() uint64        { return r.version }
func (r *Review) SubmittedAt() time.Time { return r.submittedAt }
func (r *Review) Deadline() time.Time    { return r.deadline }
func (r *Review) DecidedAt() time.Time   { return r.decidedAt }
func (r *Review) DecidedBy() string      { return r.decidedBy }

// DecidingProvider returns the provider whose finding decided the review:
// "" when no provider's finding did (pending, or decided by a moderator or
// by policy).
func (r *Review) DecidingProvider() string           { return r.decidingProvider }
func (r *Review) Reasons() []string                  { return slices.Clone(r.reasons) }
func (r *Review) Attempts() int                      { return r.attempts }
func (r *Review) EscalatedAt() time.Time             { return r.escalatedAt }
func (r *Review) EscalationReason() EscalationReason { return r.escalationReason }

// Round is the automated round: 1, plus one per requeue.
func (r *Review) Round() int { return r.round }

// RoundAttempts is how many attempts the current round has made.
func (r *Review) RoundAttempts() int { return r.attempts - r.roundBase }

// Settled is the revision of the latest event that changed the review
// itself (not a claim or hold): a moderator's expected_version is current
// when it lies between Settled and Version.
func (r *Review) Settled() uint64 { return r.settled }

// Current reports whether a moderator who saw the review at version
// expected acts on what it still is: nothing but claims and holds was
// appended since.
func (r *Review) Current(expected uint64) bool { return expected >= r.settled && expected <= r.version }

// CurrentClaim returns the review's claim, nil when none is recorded (an expired
// one stays until released: check Live).
func (r *Review) CurrentClaim() *ClaimState {
	if r.claim == nil {
		return nil
	}
	c := *r.claim
	return &c
}

// Hold returns the review's hold, nil when it is not on hold.
func (r *Review) Hold() *HoldState {
	if r.hold == nil {
		return nil
	}
	h := *r.hold
	return &h
}

// LastFailure returns how the latest attempt that ended without a finding
// ended; its Attempt is 0 when none did.
func (r *Review) LastFailure() Failure { return r.lastFailure }

// InFlightProvider returns the provider of the attempt in flight; "" when
// none is.
func (r *Review) InFlightProvider() string {
	if r.inFlight == 0 {
		return ""
	}
	return r.inFlightProvider
}

// InFlightShadows returns the shadow providers the attempt in flight is
// also sent to (AttemptStarted.Shadows); none when no attempt is in
// flight.
func (r *Review) InFlightShadows() []string {
	if r.inFlight == 0 {
		return nil
	}
	return slices.Clone(r.inFlightShadows)
}

// InFlight returns the attempt in flight, the revision of its
// AttemptStarted, when it started and its timeout; attempt is 0 when none.
func (r *Review) InFlight() (attempt int, revision uint64, started time.Time, timeout time.Duration) {
	return r.inFlight, r.inFlightRevision, r.inFlightStarted, r.inFlightTimeout
}

// Approvals returns the moderators who voted for each decision so far.
func (r *Review) Approvals() map[Decision][]string {
	out := make(map[Decision][]string, len(r.approvals))
	for d, names := range r.approvals {
		out[d] = slices.Clone(names)
	}
	return out
}

// Clone returns a copy of r that shares nothing mutable with it, so a
// caller can keep the review as it stood while applying newer events to the
// copy.
func (r *Review) Clone() *Review {
	c := *r
	c.reasons = slices.Clone(r.reasons)
	c.tried = slices.Clone(r.tried)
	c.inFlightShadows = slices.Clone(r.inFlightShadows)
	c.approvals = r.Approvals()
	if len(r.approvals) == 0 {
		c.approvals = nil
	}
	c.claim, c.hold = r.CurrentClaim(), r.Hold()
	return &c
}
