package projections

import (
	"context"
	"encoding/json"
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

var (
	// ErrNotFound is returned when the read model has no row for a review.
	ErrNotFound = errors.New("not found in read model")
	// ErrInvalidQuery is wrapped, inside a *domain.FieldError naming the
	// parameter, by queries refusing their arguments.
	ErrInvalidQuery = errors.New("invalid query")
)

// MaxLimit is the largest page a query returns.
const MaxLimit = 1000

// DB answers queries on the read models and records the one fact that is
// not a ledger event: moderator claims. It is safe for concurrent use.
type DB struct {
	pool *pgxpool.Pool
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

// Summary is a review as review_summary holds it. Its JSON matches the
// review view of GET /v1/reviews/{id} (DESIGN 5.2), extended.
type Summary struct {
	ReviewID         string     `json:"review_id"`
	State            string     `json:"state"`
	ContentClass     string     `json:"content_class"`
	Attempts         int        `json:"attempts"`
	Version          uint64     `json:"version"`
	SubmittedAt      time.Time  `json:"submitted_at"`
	Deadline         time.Time  `json:"deadline"`
	DecidedAt        *time.Time `json:"decided_at"`
	DecidedBy        *string    `json:"decided_by,omitempty"`
	Reasons          []string   `json:"reasons"`
	EscalationReason *string    `json:"escalation_reason,omitempty"`
	EscalatedAt      *time.Time `json:"escalated_at,omitempty"`
	UpdatedAt        time.Time  `json:"updated_at"`
}

func scanSummary(row pgx.Row) (Summary, error) {
	var (
		s       Summary
		version int64
		reasons []byte
	)
	err := row.Scan(&s.ReviewID, &s.State, &s.ContentClass, &s.Attempts, &version, &s.SubmittedAt, &s.Deadline,
		&s.DecidedAt, &s.DecidedBy, &reasons, &s.EscalationReason, &s.EscalatedAt, &s.UpdatedAt)
	if err != nil {
		return s, err
	}
	s.Version = uint64(version)
	if err := json.Unmarshal(reasons, &s.Reasons); err != nil {
		return s, fmt.Errorf("reasons of %s: %w", s.ReviewID, err)
	}
	s.Reasons = nonNil(s.Reasons)
	return s, nil
}

const summarySelect = `SELECT review_id, state, content_class, attempts, version, submitted_at, deadline,
	decided_at, decided_by, reasons, escalation_reason, escalated_at, updated_at FROM review_summary`

// Review returns the summary of one review, or ErrNotFound. The summary
// may trail the ledger by the projection's lag; read the ledger for a
// client's own writes.
func (db *DB) Review(ctx context.Context, reviewID string) (Summary, error) {
	s, err := scanSummary(db.pool.QueryRow(ctx, summarySelect+` WHERE review_id = $1`, reviewID))
	if errors.Is(err, pgx.ErrNoRows) {
		return s, fmt.Errorf("review %s: %w", reviewID, ErrNotFound)
	}
	if err != nil {
		return s, fmt.Errorf("review %s: %w", reviewID, err)
	}
	return s, nil
}

// ListNonTerminal returns up to limit reviews still on the automated path
// (state pending), earliest deadline first: what a restarted runner
// resumes and what the deadline sweeper escalates once past due. Reviews in
// manual_review are not terminal either but wait for a moderator, so they
// are in ManualQueue instead.
func (db *DB) ListNonTerminal(ctx context.Context, limit int) ([]Summary, error) {
	if err := checkLimit(limit); err != nil {
		return nil, err
	}
	rows, err := db.pool.Query(ctx, summarySelect+` WHERE state = 'pending' ORDER BY deadline, review_id LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("list pending reviews: %w", err)
	}
	defer rows.Close()
	out := []Summary{}
	for rows.Next() {
		s, err := scanSummary(rows)
		if err != nil {
			return nil, fmt.Errorf("list pending reviews: %w", err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list pending reviews: %w", err)
	}
	return out, nil
}

// QueueItem is one review in the manual queue; its JSON is an item of GET
// /v1/manual-queue (DESIGN 5.2), extended with priority, version (the
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
		return Queue{}, fmt.Errorf("manual queue: %w", err)
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
		return Queue{}, fmt.Errorf("manual queue: %w", err)
	}
	return q, nil
}

// seconds returns d in seconds, rounded to milliseconds, never negative.
func seconds(d time.Duration) float64 {
	return math.Max(0, math.Round(d.Seconds()*1000)/1000)
}
