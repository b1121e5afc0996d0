package domain

import (
	"fmt"
	"slices"
	"time"
)

// TypeShadowObserved names ShadowObserved.
const TypeShadowObserved = "ShadowObserved"

// ShadowOutcome is how a shadow provider's call ended.
type ShadowOutcome string

const (
	// ShadowFinding: the shadow answered a complete finding.
	ShadowFinding ShadowOutcome = "finding"
	// ShadowTimeout: no answer within the shadow's timeout.
	ShadowTimeout ShadowOutcome = "timeout"
	// ShadowError: the shadow failed (refused, 5xx, garbage), or answered
	// asynchronously, which a shadow may not: its answer is its response.
	ShadowError ShadowOutcome = "error"
)

// Valid reports whether o is one of the outcomes above.
func (o ShadowOutcome) Valid() bool {
	return o == ShadowFinding || o == ShadowTimeout || o == ShadowError
}

// ShadowObserved records what a shadow provider answered for a review: an
// observation, never a decision. It is never part of the review's own
// stream, whose revision a shadow must not move; the ledger keeps it in
// the review's shadow stream (ShadowStreamName). It holds no content.
type ShadowObserved struct {
	ReviewID     string        `json:"review_id"`
	ContentClass string        `json:"content_class"`
	Provider     string        `json:"provider"`
	Outcome      ShadowOutcome `json:"outcome"`
	// State and Reasons are the shadow's finding (outcome finding).
	State   Decision `json:"state,omitempty"`
	Reasons []string `json:"reasons,omitempty"`
	// Classification says why a call without a finding failed.
	Classification Classification `json:"classification,omitempty"`
	Detail         string         `json:"detail,omitempty"` // short diagnostic; never content
	StartedAt      time.Time      `json:"started_at"`
	// LatencyMS is how long the call took, in milliseconds.
	LatencyMS int64 `json:"latency_ms"`
}

func (ShadowObserved) EventType() string { return TypeShadowObserved }

// ShadowStreamName is the ledger stream holding a review's shadow
// observations. It does not start with StreamName's prefix, so listing
// review streams never finds it.
func ShadowStreamName(reviewID string) string { return "shadows-" + reviewID }

// ShadowResult is what a shadow call came to.
type ShadowResult struct {
	Provider       string
	Outcome        ShadowOutcome
	State          Decision
	Reasons        []string
	Classification Classification
	Detail         string
	StartedAt      time.Time
	Took           time.Duration
}

// ObserveShadow returns the event recording a shadow provider's answer for
// the review. It changes nothing in the review: the event belongs in the
// shadow stream, and Apply refuses it.
//
// Errors: ErrReviewNotFound; an invalid result (an unknown outcome, a
// finding without a valid state, a provider that is not a provider name).
func (r *Review) ObserveShadow(s ShadowResult) (ShadowObserved, error) {
	switch {
	case !r.exists:
		return ShadowObserved{}, ErrReviewNotFound
	case !ValidProviderName(s.Provider):
		return ShadowObserved{}, fmt.Errorf("shadow observation: %q is not a provider name", s.Provider)
	case !s.Outcome.Valid():
		return ShadowObserved{}, fmt.Errorf("shadow observation: unknown outcome %q", s.Outcome)
	case s.Outcome == ShadowFinding && !s.State.Valid():
		return ShadowObserved{}, fmt.Errorf("shadow observation: a finding with state %q", s.State)
	}
	e := ShadowObserved{
		ReviewID: r.id, ContentClass: r.class, Provider: s.Provider, Outcome: s.Outcome,
		Classification: s.Classification, Detail: s.Detail,
		StartedAt: s.StartedAt.UTC(), LatencyMS: max(0, s.Took.Milliseconds()),
	}
	if s.Outcome == ShadowFinding {
		e.State, e.Reasons, e.Classification = s.State, slices.Clone(s.Reasons), ""
	}
	return e, nil
}
