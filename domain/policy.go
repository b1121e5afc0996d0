package domain

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Exhaustion says what becomes of a review whose budget or attempts run out.
type Exhaustion string

const (
	// ExhaustToManualReview sends exhausted reviews to the manual queue.
	ExhaustToManualReview Exhaustion = "manual_review"
	// ExhaustToRejected fails closed: exhausted reviews are rejected by
	// policy, never by inference from a timeout.
	ExhaustToRejected Exhaustion = "rejected"
)

// Backoff is the delay between attempts: min(Max, Initial·2^n) plus a
// uniformly drawn jitter in [0, Jitter).
type Backoff struct {
	Initial time.Duration
	Max     time.Duration
	Jitter  time.Duration
}

// ClassPolicy is the review policy of one content class.
type ClassPolicy struct {
	// Budget is the end-to-end deadline, counted from submission.
	Budget time.Duration
	// AttemptTimeout caps each attempt; the real timeout is
	// min(AttemptTimeout, time remaining).
	AttemptTimeout time.Duration
	// MaxAttempts counts the initial call and every retry.
	MaxAttempts  int
	Backoff      Backoff
	OnExhaustion Exhaustion
	// HumanGate turns an automated "accepted" into manual_review.
	HumanGate bool
	// Priority orders the manual queue, higher first.
	Priority int
	// Approvals is how many distinct moderators must agree on a manual
	// decision before it takes effect (four-eyes when 2). Zero means 1.
	Approvals int
	// Objective is the share of reviews that should reach a complete
	// finding or a moderator's decision within budget, in (0, 1). Zero
	// means DefaultObjective. It is the operator's target, not part of a
	// review's record (Snapshot leaves it out): alerts and error budgets
	// judge every review by the objective in force.
	Objective float64
	// QueueSLA is how long a review may wait in the manual queue before
	// its class is alerted on. Zero means DefaultQueueSLA.
	QueueSLA time.Duration
	// Claims says whether a moderator must hold a live claim to decide a
	// review of the class (or put it on hold). Empty means ClaimsOptional.
	Claims ClaimMode
	// ManualSLA is the time a moderator has to decide a review once it is
	// in the manual queue: its due time is the escalation plus ManualSLA.
	// Zero means none.
	ManualSLA time.Duration
	// Providers is the class's route: the primary provider, then its
	// fallbacks in order. Empty means DefaultProvider alone. Like
	// Objective it is configuration, not part of a review's record
	// (Snapshot leaves it out); each AttemptStarted records the provider
	// it went to.
	Providers []string
	// Shadows are providers each review is also sent to, for comparison
	// only: they never decide nor delay a review.
	Shadows []string
}

// ClaimMode is the policy key claims.
type ClaimMode string

const (
	// ClaimsOptional: claims coordinate moderators; decisions ignore them.
	ClaimsOptional ClaimMode = "optional"
	// ClaimsRequired: only the holder of a live claim may decide.
	ClaimsRequired ClaimMode = "required"
)

// ClaimsRequired reports whether the class has claims: required.
func (p ClassPolicy) ClaimsRequired() bool { return p.Claims == ClaimsRequired }

// ClaimMode returns the class's claims key, ClaimsOptional when unset.
func (p ClassPolicy) ClaimMode() ClaimMode {
	if p.Claims == "" {
		return ClaimsOptional
	}
	return p.Claims
}

// Defaults of the service-level settings a class may leave out.
const (
	DefaultObjective = 0.99
	DefaultQueueSLA  = time.Hour
)

// SLOObjective returns the class's objective, DefaultObjective when unset.
func (p ClassPolicy) SLOObjective() float64 {
	if p.Objective == 0 {
		return DefaultObjective
	}
	return p.Objective
}

// ErrorBudget returns the share of reviews that may miss the objective:
// 1 - SLOObjective().
func (p ClassPolicy) ErrorBudget() float64 { return 1 - p.SLOObjective() }

// ManualQueueSLA returns the class's queue SLA, DefaultQueueSLA when unset.
func (p ClassPolicy) ManualQueueSLA() time.Duration {
	if p.QueueSLA == 0 {
		return DefaultQueueSLA
	}
	return p.QueueSLA
}

// PolicyError names the class and key of an invalid policy setting. It wraps
// ErrInvalidPolicy.
type PolicyError struct {
	Class  string
	Key    string
	Reason string
}

func (e *PolicyError) Error() string {
	return fmt.Sprintf("class %q: %s: %s", e.Class, e.Key, e.Reason)
}
func (e *PolicyError) Unwrap() error { return ErrInvalidPolicy }

// RequiredApprovals returns how many moderators must agree, at least 1.
func (p ClassPolicy) RequiredApprovals() int { return max(1, p.Approvals) }

// Validate checks the policy of the named class. The error is a
// *PolicyError naming the first key at fault.
func (p ClassPolicy) Validate(class string) error {
	bad := func(key, format string, args ...any) error {
		return &PolicyError{Class: class, Key: key, Reason: fmt.Sprintf(format, args...)}
	}
	positive := []struct {
		key string
		d   time.Duration
	}{
		{"budget", p.Budget},
		{"attempt_timeout", p.AttemptTimeout},
		{"backoff.initial", p.Backoff.Initial},
		{"backoff.max", p.Backoff.Max},
	}
	for _, f := range positive {
		switch {
		case f.d <= 0:
			return bad(f.key, "must be a positive duration, got %s", f.d)
		case f.d < time.Millisecond:
			// Reviews record their policy in milliseconds (PolicySnapshot).
			return bad(f.key, "must be at least 1ms, got %s", f.d)
		}
	}
	switch {
	case p.Backoff.Jitter < 0:
		return bad("backoff.jitter", "must not be negative, got %s", p.Backoff.Jitter)
	case p.AttemptTimeout > p.Budget:
		return bad("attempt_timeout", "%s is above budget %s", p.AttemptTimeout, p.Budget)
	case p.Backoff.Max < p.Backoff.Initial:
		return bad("backoff.max", "%s is below backoff.initial %s", p.Backoff.Max, p.Backoff.Initial)
	case p.MaxAttempts < 1:
		return bad("max_attempts", "must be at least 1, got %d", p.MaxAttempts)
	case p.Approvals < 0:
		return bad("approvals", "must be at least 1, got %d", p.Approvals)
	case p.Objective < 0 || p.Objective >= 1 || p.Objective != p.Objective:
		return bad("objective", "must be above 0 and below 1 (such as 0.99), got %v", p.Objective)
	case p.QueueSLA < 0:
		return bad("queue_sla", "must be a positive duration, got %s", p.QueueSLA)
	case p.ManualSLA < 0:
		return bad("manual_sla", "must be a positive duration, got %s", p.ManualSLA)
	case p.ManualSLA > 0 && p.ManualSLA < time.Millisecond:
		return bad("manual_sla", "must be at least 1ms, got %s", p.ManualSLA)
	}
	if err := p.validateProviders(class); err != nil {
		return err
	}
	switch p.Claims {
	case "", ClaimsOptional, ClaimsRequired:
	default:
		return bad("claims", "must be optional or required, got %q", p.Claims)
	}
	switch p.OnExhaustion {
	case ExhaustToManualReview, ExhaustToRejected:
	default:
		return bad("on_exhaustion", "must be manual_review or rejected, got %q", p.OnExhaustion)
	}
	return nil
}

// Policy maps content classes to their policies.
type Policy struct {
	Classes map[string]ClassPolicy
}

// Class returns the policy of a class, or a *FieldError on "content_class"
// wrapping ErrUnknownClass.
func (p Policy) Class(name string) (ClassPolicy, error) {
	c, ok := p.Classes[name]
	if !ok {
		return ClassPolicy{}, &FieldError{Field: "content_class", Reason: fmt.Sprintf("unknown content class %q", name), Err: ErrUnknownClass}
	}
	return c, nil
}

// Names returns the class names in sorted order.
func (p Policy) Names() []string {
	names := make([]string, 0, len(p.Classes))
	for n := range p.Classes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Validate checks every class, in name order.
func (p Policy) Validate() error {
	if len(p.Classes) == 0 {
		return &PolicyError{Class: "", Key: "classes", Reason: "no content classes defined"}
	}
	for _, name := range p.Names() {
		if err := p.Classes[name].Validate(name); err != nil {
			return err
		}
	}
	return nil
}

// DefaultPolicy is used when no policy file is configured.
func DefaultPolicy() Policy {
	backoff := Backoff{Initial: 100 * time.Millisecond, Max: 2 * time.Second, Jitter: 75 * time.Millisecond}
	return Policy{Classes: map[string]ClassPolicy{
		"caption_suggestion": {
			Budget: 30 * time.Second, AttemptTimeout: 10 * time.Second, MaxAttempts: 3,
			Backoff: backoff, OnExhaustion: ExhaustToManualReview, Priority: 1,
		},
		"transcript_import": {
			Budget: 60 * time.Second, AttemptTimeout: 20 * time.Second, MaxAttempts: 3,
			Backoff: backoff, OnExhaustion: ExhaustToManualReview, Priority: 2,
		},
		"publishing_rule": {
			Budget: 30 * time.Second, AttemptTimeout: 10 * time.Second, MaxAttempts: 3,
			Backoff: backoff, OnExhaustion: ExhaustToRejected, HumanGate: true, Priority: 3,
		},
	}}
}

// PolicySnapshot is the JSON form of a ClassPolicy recorded in Submitted, so
// a review keeps the policy it was submitted under. Durations are
// milliseconds.
type PolicySnapshot struct {
	BudgetMS         int64      `json:"budget_ms"`
	AttemptTimeoutMS int64      `json:"attempt_timeout_ms"`
	MaxAttempts      int        `json:"max_attempts"`
	BackoffInitialMS int64      `json:"backoff_initial_ms"`
	BackoffMaxMS     int64      `json:"backoff_max_ms"`
	BackoffJitterMS  int64      `json:"backoff_jitter_ms"`
	OnExhaustion     Exhaustion `json:"on_exhaustion"`
	HumanGate        bool       `json:"human_gate"`
	Priority         int        `json:"priority"`
	Approvals        int        `json:"approvals"`
	// Claims and ManualSLAMS are left out when unset, so the snapshots of
	// classes without them read as before.
	Claims      ClaimMode `json:"claims,omitempty"`
	ManualSLAMS int64     `json:"manual_sla_ms,omitempty"`
}

// Canonical returns the stored bytes of s: the bytes its Digest is taken
// over.
func (s PolicySnapshot) Canonical() []byte {
	b, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("encode policy snapshot: %v", err)) // scalar fields only: cannot fail
	}
	return b
}

// PolicyDigest returns "sha256:<hex>" of canonical policy snapshot bytes.
func PolicyDigest(canonical []byte) string {
	sum := sha256.Sum256(canonical)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Digest returns the digest a schema 2 Submitted names s by.
func (s PolicySnapshot) Digest() string {
	if d, ok := digests.Load(s); ok {
		return d.(string)
	}
	d := PolicyDigest(s.Canonical())
	if digestsKept.Add(1) <= maxDigestsKept {
		digests.Store(s, d)
	}
	return d
}

// digests remembers the digests of the snapshots seen: a ledger holds one
// a class and policy change, and every Submitted read is checked against
// its own (Review.Apply), which was a tenth of the CPU of audit verify.
// At most maxDigestsKept are kept, whatever a store holds.
var (
	digests     sync.Map // PolicySnapshot → string
	digestsKept atomic.Int64
)

const maxDigestsKept = 4096

// A PolicySnapshot is a map key (digests): a field that is not comparable
// fails the build here, not a Load at run time.
var _ map[PolicySnapshot]struct{}

// Snapshot returns the recordable form of p.
func (p ClassPolicy) Snapshot() PolicySnapshot {
	return PolicySnapshot{
		BudgetMS:         p.Budget.Milliseconds(),
		AttemptTimeoutMS: p.AttemptTimeout.Milliseconds(),
		MaxAttempts:      p.MaxAttempts,
		BackoffInitialMS: p.Backoff.Initial.Milliseconds(),
		BackoffMaxMS:     p.Backoff.Max.Milliseconds(),
		BackoffJitterMS:  p.Backoff.Jitter.Milliseconds(),
		OnExhaustion:     p.OnExhaustion,
		HumanGate:        p.HumanGate,
		Priority:         p.Priority,
		Approvals:        p.RequiredApprovals(),
		Claims:           p.Claims,
		ManualSLAMS:      p.ManualSLA.Milliseconds(),
	}
}

// ClassPolicy returns the policy a snapshot records.
func (s PolicySnapshot) ClassPolicy() ClassPolicy {
	ms := func(n int64) time.Duration { return time.Duration(n) * time.Millisecond }
	return ClassPolicy{
		Budget:         ms(s.BudgetMS),
		AttemptTimeout: ms(s.AttemptTimeoutMS),
		MaxAttempts:    s.MaxAttempts,
		Backoff:        Backoff{Initial: ms(s.BackoffInitialMS), Max: ms(s.BackoffMaxMS), Jitter: ms(s.BackoffJitterMS)},
		OnExhaustion:   s.OnExhaustion,
		HumanGate:      s.HumanGate,
		Priority:       s.Priority,
		Approvals:      s.Approvals,
		Claims:         s.Claims,
		ManualSLA:      ms(s.ManualSLAMS),
	}
}
