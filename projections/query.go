package projections

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/domain"
)

// ErrInvalidQuery is wrapped, inside a *domain.FieldError naming the
// parameter, by queries refusing their arguments.
var ErrInvalidQuery = errors.New("invalid query")

// MaxLimit is the largest page a query returns.
const MaxLimit = 1000

// DB answers queries on the read models and records the one fact that is
// not a ledger event: moderator claims. It is safe for concurrent use.
type DB struct {
	pool *pgxpool.Pool
	// replica, when set, serves the read-model queries while it is well
	// (WithReplica); pool is the primary.
	replica *Replica
	// objectives are the classes' SLO objectives; a class not in it has
	// domain.DefaultObjective.
	objectives map[string]float64
}

// NewDB returns a DB on pool, which must hold the migrated schema.
func NewDB(pool *pgxpool.Pool) *DB { return &DB{pool: pool} }

// WithObjectives returns a DB judging error budgets by the objectives
// given per class (domain.ClassPolicy.SLOObjective); classes not named
// have domain.DefaultObjective.
func (db *DB) WithObjectives(objectives map[string]float64) *DB {
	c := *db
	c.objectives = maps.Clone(objectives)
	return &c
}

// Objectives returns the objectives of a policy's classes, for
// WithObjectives.
func Objectives(p domain.Policy) map[string]float64 {
	out := make(map[string]float64, len(p.Classes))
	for name, c := range p.Classes {
		out[name] = c.SLOObjective()
	}
	return out
}

func (db *DB) objective(class string) float64 {
	if o, ok := db.objectives[class]; ok {
		return o
	}
	return domain.DefaultObjective
}

// classes returns the classes of the objectives and those seen, sorted.
func (db *DB) classes(seen []string) []string {
	out := slices.Collect(maps.Keys(db.objectives))
	for _, c := range seen {
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out
}

func invalid(field, format string, args ...any) error {
	return &domain.FieldError{Field: field, Reason: fmt.Sprintf(format, args...), Err: ErrInvalidQuery}
}

func checkLimit(limit int) error {
	if limit < 1 || limit > MaxLimit {
		return invalid("limit", "must be between 1 and %d, got %d", MaxLimit, limit)
	}
	return nil
}

// QueueItem is one review in the manual queue; its JSON is an item of GET
// /v1/manual-queue (docs/contracts.md §2), extended with priority, version (the
// expected_version of a decision) and the approvals so far.
type QueueItem struct {
	ReviewID          string     `json:"review_id"`
	ContentClass      string     `json:"content_class"`
	Reason            string     `json:"reason"`
	Attempts          int        `json:"attempts"`
	EscalatedAt       time.Time  `json:"escalated_at"`
	AgeSeconds        float64    `json:"age_seconds"`
	ClaimedBy         *string    `json:"claimed_by"`
	ClaimExpiresAt    *time.Time `json:"claim_expires_at"`
	Priority          int        `json:"priority"`
	Version           uint64     `json:"version"`
	RequiredApprovals int        `json:"required_approvals"`
	Approvers         []string   `json:"approvers"`
}

// Queue is the body of GET /v1/manual-queue.
type Queue struct {
	Items []QueueItem `json:"items"`
}

// ManualQueue returns up to limit (1 to MaxLimit) reviews waiting for a
// moderator, of class (every class when empty), highest priority first,
// then oldest escalation first. Claims are shown only while their lease is
// live at now.
func (db *DB) ManualQueue(ctx context.Context, class string, limit int, now time.Time) (Queue, error) {
	return readFrom(ctx, db, func(db *DB) (Queue, error) { return db.manualQueue(ctx, class, limit, now) })
}

func (db *DB) manualQueue(ctx context.Context, class string, limit int, now time.Time) (Queue, error) {
	if err := checkLimit(limit); err != nil {
		return Queue{}, err
	}
	rows, err := db.pool.Query(ctx, `SELECT q.review_id, q.content_class, q.reason, q.attempts, q.escalated_at,
			c.moderator, c.expires_at, q.priority, q.version, q.required_approvals, q.approvers
		FROM manual_queue q
		LEFT JOIN manual_claim c ON c.review_id = q.review_id AND c.expires_at > $3
		WHERE $1 = '' OR q.content_class = $1
		ORDER BY q.priority DESC, q.escalated_at, q.review_id
		LIMIT $2`, class, limit, now)
	if err != nil {
		return Queue{}, dbErr(ctx, "manual queue", err)
	}
	q := Queue{Items: []QueueItem{}}
	var (
		it      QueueItem
		version int64
	)
	_, err = pgx.ForEachRow(rows, []any{&it.ReviewID, &it.ContentClass, &it.Reason, &it.Attempts, &it.EscalatedAt,
		&it.ClaimedBy, &it.ClaimExpiresAt, &it.Priority, &version, &it.RequiredApprovals, &it.Approvers}, func() error {
		item := it
		item.Version = uint64(version)
		item.AgeSeconds = seconds(now.Sub(item.EscalatedAt))
		item.Approvers = nonNil(item.Approvers)
		q.Items = append(q.Items, item)
		it = QueueItem{}
		return nil
	})
	if err != nil {
		return Queue{}, dbErr(ctx, "manual queue", err)
	}
	return q, nil
}

// seconds returns d in seconds, rounded to milliseconds, never negative.
func seconds(d time.Duration) float64 {
	return math.Max(0, math.Round(d.Seconds()*1000)/1000)
}
