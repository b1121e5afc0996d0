package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/reviewledger/reviewledger/api/runner"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

// Ledger reads and appends review streams (*ledger.Ledger).
type Ledger interface {
	// Load rebuilds a review; domain.ErrReviewNotFound when it has no events.
	Load(ctx context.Context, reviewID string) (*ledger.Review, error)
	// History reads a review's stored events in revision order;
	// domain.ErrReviewNotFound when there are none.
	History(ctx context.Context, reviewID string) (*ledger.History, error)
	// Append appends events expecting the stream at rv's version; the error
	// matches eventstore.ErrWrongExpectedVersion when it moved.
	Append(ctx context.Context, rv *ledger.Review, actor ledger.Actor, events ...domain.Event) (*ledger.Review, error)
}

// Reviews is the review runner's control path (*runner.Service).
type Reviews interface {
	// Submit creates the review, or returns the existing one with created
	// false when the same review (same class and content) was submitted
	// before. Errors: *domain.FieldError / domain.ErrInvalidReviewID,
	// domain.ErrUnknownClass, domain.ErrReviewExists (other content or class).
	Submit(ctx context.Context, req runner.SubmitRequest) (rv *ledger.Review, created bool, err error)
	// HandleCallback verifies and applies a provider's finding callback.
	// Errors: provider.ErrInvalidSignature (bad or stale signature),
	// domain.ErrReviewNotFound, runner.ErrConflictingCompletion,
	// domain.ErrInvalidFinding.
	HandleCallback(ctx context.Context, reviewID string, header http.Header, body []byte) error
	// InFlight is the number of reviews being worked on now.
	InFlight() int
}

// QueueItem is one review waiting in the manual queue.
type QueueItem struct {
	ReviewID       string
	ContentClass   string
	Reason         string
	Attempts       int
	Priority       int
	EscalatedAt    time.Time
	ClaimedBy      string    // "" when unclaimed
	ClaimExpiresAt time.Time // zero when unclaimed
}

// Claim is a moderator's lease on a manual-queue item.
type Claim struct {
	ReviewID  string
	ClaimedBy string
	ExpiresAt time.Time
}

// SLOSummary is the outcome SLO over a window.
type SLOSummary struct {
	Total                  int64
	CompletedWithinBudget  int64
	Escalated              int64
	ConflictingCompletions int64
	LatencyP50MS           float64
	LatencyP90MS           float64
	LatencyP99MS           float64
	QueueDepth             int64
	OldestAge              time.Duration
}

// ReadModels are the projections the API serves.
type ReadModels interface {
	// ManualQueue lists manual-queue items, highest priority then oldest
	// first; class "" means every class.
	ManualQueue(ctx context.Context, class string, limit int) ([]QueueItem, error)
	// Claim leases an item to a moderator until now+lease. Errors: a live
	// claim by another moderator (409), domain.ErrReviewNotFound when the
	// review is not in the queue.
	Claim(ctx context.Context, reviewID, moderator string, lease time.Duration, now time.Time) (Claim, error)
	// SLO summarises the window ending at now; class "" means every class.
	SLO(ctx context.Context, window time.Duration, class string, now time.Time) (SLOSummary, error)
}

// Check is one readiness check for /readyz.
type Check struct {
	Name  string
	Check func(ctx context.Context) error
}

// ErrClaimedByOther is the claim conflict until the projections' own
// sentinel is wired in through Deps.Errors.
var ErrClaimedByOther = errors.New("claimed by another moderator")

var _ Reviews = (*runner.Service)(nil)
