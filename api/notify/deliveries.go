package notify

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/domain"
)

// Errors of DB.
var (
	// ErrDeliveryNotFound: no delivery has the ID.
	ErrDeliveryNotFound = errors.New("delivery not found")
	// ErrInvalidQuery is wrapped, inside a *domain.FieldError naming the
	// parameter, by a Query that is refused.
	ErrInvalidQuery = errors.New("invalid delivery query")
)

// Delivery states as listed. The stored state is pending, delivered or
// failed; retrying is a pending delivery that failed at least once.
const (
	StatePending   = "pending"   // not attempted yet
	StateRetrying  = "retrying"  // failed at least once; attempted again at next_attempt_at
	StateFailed    = "failed"    // given up at the end of its retry window; redeliver it
	StateDelivered = "delivered" // answered 2xx
	// StateFailing selects retrying and failed deliveries together.
	StateFailing = "failing"
)

// Query limits.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
)

// Delivery is one webhook as the admin routes list it.
type Delivery struct {
	// ID is the webhook-id.
	ID       string `json:"id"`
	ReviewID string `json:"review_id"`
	// Version is the review's version the event made (the body's
	// data.version).
	Version   uint64 `json:"version"`
	EventType string `json:"event_type"`
	State     string `json:"state"`
	Attempts  int    `json:"attempts"`
	// CreatedAt is when the change was recorded in the ledger.
	CreatedAt     time.Time  `json:"created_at"`
	NextAttemptAt *time.Time `json:"next_attempt_at"`
	LastAttemptAt *time.Time `json:"last_attempt_at"`
	// LastStatus is the HTTP status of the last attempt; null when it got
	// no answer or none was made.
	LastStatus *int `json:"last_status"`
	// LastError says why the last attempt failed; null once delivered.
	LastError   *string    `json:"last_error"`
	DeliveredAt *time.Time `json:"delivered_at"`
}

// Query selects deliveries; the zero value is every delivery, the oldest
// DefaultLimit first.
type Query struct {
	// State is one of the listed states, StateFailing, or "" for all.
	State string
	// ReviewID keeps one review's deliveries; "" for every review's.
	ReviewID string
	// Limit is how many at most (1 to MaxLimit; 0 is DefaultLimit).
	Limit int
}

func invalid(field, format string, args ...any) error {
	return &domain.FieldError{Field: field, Reason: fmt.Sprintf(format, args...), Err: ErrInvalidQuery}
}

// states maps a Query.State to its condition.
var states = map[string]string{
	"":             "true",
	StatePending:   "state = 'pending' AND attempts = 0",
	StateRetrying:  "state = 'pending' AND attempts > 0",
	StateFailed:    "state = 'failed'",
	StateDelivered: "state = 'delivered'",
	StateFailing:   "(state = 'failed' OR (state = 'pending' AND attempts > 0))",
}

// Validate names the field at fault; the error matches ErrInvalidQuery.
func (q Query) Validate() error {
	if _, ok := states[q.State]; !ok {
		return invalid("state", "must be one of %s, got %q", strings.Join([]string{StateFailing, StatePending, StateRetrying, StateFailed, StateDelivered}, ", "), q.State)
	}
	if q.ReviewID != "" {
		if err := domain.ValidateReviewID(q.ReviewID); err != nil {
			return invalid("review_id", "%v", err)
		}
	}
	if q.Limit < 0 || q.Limit > MaxLimit {
		return invalid("limit", "must be between 1 and %d, got %d", MaxLimit, q.Limit)
	}
	return nil
}

// DB lists deliveries and asks for redeliveries. Any process may use it:
// the active notifier sees a redelivery within its PollInterval.
type DB struct{ pool *pgxpool.Pool }

// NewDB returns a DB on the database of pool.
func NewDB(pool *pgxpool.Pool) *DB { return &DB{pool: pool} }

const deliveryColumns = `id, review_id, revision, event_type, state, attempts, created_at, next_attempt_at,
	last_attempt_at, last_status, last_error, delivered_at`

func scanDelivery(row pgx.Row) (Delivery, error) {
	var (
		d    Delivery
		rev  int64
		next time.Time
	)
	if err := row.Scan(&d.ID, &d.ReviewID, &rev, &d.EventType, &d.State, &d.Attempts, &d.CreatedAt, &next,
		&d.LastAttemptAt, &d.LastStatus, &d.LastError, &d.DeliveredAt); err != nil {
		return Delivery{}, err
	}
	d.Version = uint64(rev)
	d.CreatedAt = d.CreatedAt.UTC()
	if d.State == StatePending {
		next = next.UTC()
		d.NextAttemptAt = &next
		if d.Attempts > 0 {
			d.State = StateRetrying
		}
	}
	for _, t := range []**time.Time{&d.LastAttemptAt, &d.DeliveredAt} {
		if *t != nil {
			u := (*t).UTC()
			*t = &u
		}
	}
	return d, nil
}

// List returns the deliveries q selects, oldest first. Errors: a
// *domain.FieldError matching ErrInvalidQuery.
func (db *DB) List(ctx context.Context, q Query) ([]Delivery, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	limit := q.Limit
	if limit == 0 {
		limit = DefaultLimit
	}
	rows, err := db.pool.Query(ctx, `SELECT `+deliveryColumns+` FROM notify_delivery
		WHERE `+states[q.State]+` AND ($1 = '' OR review_id = $1)
		ORDER BY created_at, review_id, revision LIMIT $2`, q.ReviewID, limit)
	if err != nil {
		return nil, fmt.Errorf("list deliveries: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Delivery, error) { return scanDelivery(row) })
	if err != nil {
		return nil, fmt.Errorf("list deliveries: %w", err)
	}
	return out, nil
}

// Redeliver makes the delivery due at now with a new retry window, whatever
// its state (a delivered one is sent again, with the same webhook-id), and
// returns it. Errors: ErrDeliveryNotFound.
func (db *DB) Redeliver(ctx context.Context, id string, now time.Time) (Delivery, error) {
	d, err := scanDelivery(db.pool.QueryRow(ctx, `UPDATE notify_delivery SET state = 'pending', next_attempt_at = $2, retry_since = $2,
		delivered_at = NULL WHERE id = $1 RETURNING `+deliveryColumns, id, now))
	if errors.Is(err, pgx.ErrNoRows) {
		return Delivery{}, fmt.Errorf("delivery %q: %w", id, ErrDeliveryNotFound)
	}
	if err != nil {
		return Delivery{}, fmt.Errorf("redeliver %q: %w", id, err)
	}
	return d, nil
}

// RedeliverFailed makes every given-up delivery due at now with a new
// retry window and returns how many there were.
func (db *DB) RedeliverFailed(ctx context.Context, now time.Time) (int64, error) {
	tag, err := db.pool.Exec(ctx, `UPDATE notify_delivery SET state = 'pending', next_attempt_at = $1, retry_since = $1
		WHERE state = 'failed'`, now)
	if err != nil {
		return 0, fmt.Errorf("redeliver the failed deliveries: %w", err)
	}
	return tag.RowsAffected(), nil
}
