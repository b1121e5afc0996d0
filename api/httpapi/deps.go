package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/reviewledger/reviewledger/api/engine"
	"github.com/reviewledger/reviewledger/api/notify"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/projections"
)

// Ledger reads and appends review streams (*ledger.Ledger).
type Ledger interface {
	// Load rebuilds a review; domain.ErrReviewNotFound when it has no events.
	Load(ctx context.Context, reviewID string) (*ledger.Snapshot, error)
	// History reads a review's stored events in revision order;
	// domain.ErrReviewNotFound when there are none.
	History(ctx context.Context, reviewID string) (*ledger.History, error)
	// Write appends a command's step expecting the stream at rv's
	// version; the error matches eventstore.ErrWrongExpectedVersion when
	// it moved. The moderator commands write through ledger.Commands.
	Write(ctx context.Context, rv *ledger.Snapshot, by ledger.Actor, s ledger.Step) (*ledger.Snapshot, error)
}

// Reviews is the review engine (*engine.Engine): submissions and callbacks.
type Reviews interface {
	// Submit creates the review, or returns the existing one with created
	// false when the same review (same class and content) was submitted
	// before. Errors: *domain.FieldError / domain.ErrInvalidReviewID,
	// domain.ErrUnknownClass, domain.ErrReviewExists (other content or class).
	Submit(ctx context.Context, req engine.SubmitRequest) (rv *ledger.Snapshot, created bool, err error)
	// HandleCallback verifies and applies a provider's finding callback.
	// Errors: provider.ErrInvalidSignature (bad or stale signature),
	// domain.ErrReviewNotFound, engine.ErrConflictingCompletion,
	// domain.ErrInvalidFinding.
	HandleCallback(ctx context.Context, reviewID string, header http.Header, body []byte) error
	// Outstanding is the number of reviews submitted and not yet out of
	// pending, across every process: the work the workers still owe.
	Outstanding() int
}

// ReadModels are the projections the API serves (*projections.DB). Their
// JSON is the body of the route, as docs/contracts.md §2 specifies it, extended.
type ReadModels interface {
	// ManualQueue lists the manual-queue items q selects, in q's order.
	// Claims show only while live at now. Errors:
	// projections.ErrInvalidQuery naming the field.
	ManualQueue(ctx context.Context, q projections.QueueQuery, now time.Time) (projections.Queue, error)
	// CountQueue counts the manual-queue items q selects.
	CountQueue(ctx context.Context, q projections.QueueQuery, now time.Time) (int, error)
	// SLO summarises the window ending at now; class "" means every class.
	SLO(ctx context.Context, window time.Duration, class string, now time.Time) (projections.SLOSummary, error)
	// SLOSeries is the SLO of the window ending at now, step by step.
	// Errors: projections.ErrInvalidQuery naming the field (step).
	SLOSeries(ctx context.Context, window, step time.Duration, class string, now time.Time) (projections.Series, error)
	// AttemptServiceTimes is each class's attempt service-time
	// distribution over the window ending at now.
	AttemptServiceTimes(ctx context.Context, class string, window time.Duration, now time.Time) ([]projections.ServiceTimes, error)
	// ProviderSLO is each provider's figures per class over the window
	// ending at now; class and provider "" mean all.
	ProviderSLO(ctx context.Context, window time.Duration, class, provider string, now time.Time) (projections.ProviderReport, error)
	// ProviderSeries is ProviderSLO step by step. Errors:
	// projections.ErrInvalidQuery naming the field (step).
	ProviderSeries(ctx context.Context, window, step time.Duration, class, provider string, now time.Time) (projections.ProviderSeries, error)
}

var _ ReadModels = (*projections.DB)(nil)

// Requeuer sends a review in manual_review back to the automated path
// (*engine.Engine): it appends the Requeued event with the review's work
// record written again, so the workers take it.
type Requeuer interface {
	Requeue(ctx context.Context, rv *ledger.Snapshot, e domain.Requeued, by ledger.Actor) (*ledger.Snapshot, error)
}

var _ Requeuer = (*engine.Engine)(nil)

// Contents reads the content submitted for review (*engine.Engine), for
// moderators to read what they decide on.
type Contents interface {
	// Content returns the review's content type as recorded in the ledger,
	// its stored bytes and their digest ("sha256:<hex>"), which equals the
	// ledger's Submitted payload_digest. Errors: domain.ErrReviewNotFound,
	// engine.ErrContentPurged (the review exists, its content is no longer
	// stored), engine.ErrContentMismatch (the stored bytes are not the
	// ones reviewed: never served).
	Content(ctx context.Context, reviewID string) (contentType string, content []byte, digest string, err error)
}

var _ Contents = (*engine.Engine)(nil)

// Watcher tells when a review may have left pending (*ledger.Watcher).
type Watcher interface {
	// Watch returns a channel that receives once when the review may have
	// left pending: the review as it stands then, or nil when it must be
	// read again; and a function to call when no longer interested.
	Watch(reviewID string) (changed <-chan *ledger.Snapshot, stop func())
}

var _ Watcher = (*ledger.Watcher)(nil)

// Deliveries are the decision webhooks' deliveries (*notify.DB).
type Deliveries interface {
	// List returns the deliveries q selects, oldest first. Errors: a
	// *domain.FieldError matching notify.ErrInvalidQuery.
	List(ctx context.Context, q notify.Query) ([]notify.Delivery, error)
	// Redeliver makes the delivery due at now, with a new retry window.
	// Errors: notify.ErrDeliveryNotFound.
	Redeliver(ctx context.Context, id string, now time.Time) (notify.Delivery, error)
}

var _ Deliveries = (*notify.DB)(nil)

// ReadReplica is a streaming replica of the database serving the read
// models (*projections.Replica).
type ReadReplica interface {
	// Check measures the replica's replay lag, decides whether the read
	// models are read from it or from the primary, and reports it.
	Check(ctx context.Context) projections.ReplicaStatus
}

var _ ReadReplica = (*projections.Replica)(nil)

// Check is one readiness check for /readyz.
type Check struct {
	Name  string
	Check func(ctx context.Context) error
}

var _ Reviews = (*engine.Engine)(nil)
