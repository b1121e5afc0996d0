// Package provider talks to moderation providers: the Provider port the
// review engine calls once per attempt, the http adapter of the provider
// protocol (docs/contracts.md, section 4), the seeded simulator used by `make run`, demos and benchmarks, and the
// Standard Webhooks signing and verification of findings callbacks.
package provider

import (
	"context"
	"time"

	"github.com/reviewledger/reviewledger/domain"
)

// Provider is a moderation provider. Each call is one attempt.
//
// Call must return when ctx is done (the attempt's timeout, its owner's
// lease lost, or the engine stopping); what it returns then is ignored. It
// never returns a decision it did not receive: anything short of a parsed
// answer is a Failure.
type Provider interface {
	Call(ctx context.Context, req Request) Result
}

// Request is one attempt's call.
type Request struct {
	ReviewID     string
	Attempt      int
	ContentClass string
	ContentType  string
	Content      []byte
	// Timeout is what is left of the attempt's timeout, which runs from
	// its recorded start (the whole of it for a call made as the attempt
	// starts), for providers that schedule work against it (the
	// simulator's callbacks). ctx is cancelled at it.
	Timeout time.Duration
}

// Outcome says what kind of answer a Result holds.
type Outcome int

const (
	// OutcomeFailure: no usable answer; Classification says why. Retryable
	// unless the classification is provider_refused.
	OutcomeFailure Outcome = iota
	// OutcomeFinding: the provider answered with a finding. The engine
	// still checks it is complete (domain.Finding.CheckComplete).
	OutcomeFinding
	// OutcomeAccepted: the provider took the request for asynchronous
	// review (202); the finding comes by signed callback.
	OutcomeAccepted
)

func (o Outcome) String() string {
	switch o {
	case OutcomeFinding:
		return "finding"
	case OutcomeAccepted:
		return "accepted_async"
	default:
		return "failure"
	}
}

// Result is the answer to one attempt.
type Result struct {
	Outcome Outcome
	// Finding is set for OutcomeFinding, with Attempt filled from the request.
	Finding domain.Finding
	// Classification is set for OutcomeFailure.
	Classification domain.Classification
	// Detail is a short diagnostic such as "http 503"; never content.
	Detail string
	// RetryAfter is the provider's Retry-After, zero when it gave none.
	RetryAfter time.Duration
	// Unsent is set when the call ended before any of its request was
	// written (its headers): the provider cannot have seen it. Only a
	// provider that knows sets it (the HTTP provider, through net/http's
	// client trace, which a custom HTTPConfig.Client's transport must
	// honour); false says nothing.
	Unsent bool
}

// Retryable reports whether another attempt may follow this result.
func (r Result) Retryable() bool {
	return r.Outcome == OutcomeFailure && r.Classification != domain.ClassProviderRefused
}

// Failure returns a failure result.
func Failure(c domain.Classification, detail string) Result {
	return Result{Outcome: OutcomeFailure, Classification: c, Detail: detail}
}
