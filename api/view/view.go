// Package view holds the JSON documents reviewledger shows of a review: the
// review view of GET /v1/reviews/{id} (also the answer of a submission and
// of a decision) and the body of the decision webhooks, which carries the
// same view. It is a leaf: the HTTP API and the notifier both render
// through it, so a receiver of a webhook reads the same fields a client of
// the API does.
package view

import (
	"time"

	"github.com/reviewledger/reviewledger/domain"
)

// Review is the JSON of a review (docs/contracts.md §2). Fields are only ever added.
type Review struct {
	ReviewID     string     `json:"review_id"`
	State        string     `json:"state"`
	ContentClass string     `json:"content_class"`
	Attempts     int        `json:"attempts"`
	Version      uint64     `json:"version"`
	SubmittedAt  time.Time  `json:"submitted_at"`
	Deadline     time.Time  `json:"deadline"`
	DecidedAt    *time.Time `json:"decided_at"`
	Reasons      []string   `json:"reasons"`
	// DecidedByProvider names the provider whose finding decided the
	// review; absent while pending and when a moderator or the policy
	// decided.
	DecidedByProvider string `json:"decided_by_provider,omitempty"`
}

// NewReview returns the view of r as it stands.
func NewReview(r *domain.Review) Review {
	v := Review{
		ReviewID:     r.ID(),
		State:        string(r.State()),
		ContentClass: r.Class(),
		Attempts:     r.Attempts(),
		Version:      r.Version(),
		SubmittedAt:  r.SubmittedAt().UTC(),
		Deadline:     r.Deadline().UTC(),
		Reasons:      r.Reasons(),

		DecidedByProvider: r.DecidingProvider(),
	}
	if v.Reasons == nil {
		v.Reasons = []string{}
	}
	if at := r.DecidedAt(); !at.IsZero() {
		at = at.UTC()
		v.DecidedAt = &at
	}
	return v
}
