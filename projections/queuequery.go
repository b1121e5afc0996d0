package projections

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/storeerr"
)

// QueueItem is one review in the manual queue; its JSON is an item of GET
// /v1/manual-queue (docs/contracts.md §2), extended with priority, version (the
// expected_version of a decision), the approvals so far, the round, the
// due time and the hold.
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
	Round             int        `json:"round"`
	DueAt             *time.Time `json:"due_at"`
	SLABreached       bool       `json:"sla_breached"`
	Claims            string     `json:"claims"`
	Held              bool       `json:"held"`
	HeldBy            *string    `json:"held_by"`
	HeldAt            *time.Time `json:"held_at"`
	HoldNote          *string    `json:"hold_note"`
}

// Queue is the body of GET /v1/manual-queue.
type Queue struct {
	Items []QueueItem `json:"items"`
	// Now is the clock the queue was read at, to count time left against
	// due times.
	Now time.Time `json:"now"`
}

// HeldFilter selects items by their hold.
type HeldFilter string

const (
	HeldExcluded HeldFilter = "false" // unheld items only
	HeldOnly     HeldFilter = "true"
	HeldAny      HeldFilter = "any" // every item (the default)
)

// Queue orders.
const (
	OrderPriority = "priority" // highest priority, then oldest escalation (the default)
	OrderDue      = "due"      // highest priority, then earliest due time (none last), then oldest
	OrderID       = "id"       // review ID, for paging through a selection (After)
)

// QueueQuery selects manual-queue items.
type QueueQuery struct {
	// Class and Reason filter by content class and escalation reason;
	// empty means any.
	Class, Reason string
	// ClaimedBy keeps the items whose live claim is that moderator's.
	ClaimedBy string
	// Held: HeldAny when empty, so that a client that knows nothing of
	// holds sees every review in manual_review.
	Held HeldFilter
	// IDs keeps only these reviews (at most MaxLimit); nil means any.
	IDs []string
	// Order: OrderPriority when empty. With OrderID, After skips the
	// reviews whose ID sorts before or at it.
	Order string
	After string
	// Limit is 1 to MaxLimit.
	Limit int
}

func (q QueueQuery) check(count bool) error {
	switch q.Held {
	case "", HeldExcluded, HeldOnly, HeldAny:
	default:
		return invalid("held", "must be false, true or any, got %q", q.Held)
	}
	switch q.Order {
	case "", OrderPriority, OrderDue, OrderID:
	default:
		return invalid("order", "must be priority or due, got %q", q.Order)
	}
	if len(q.IDs) > MaxLimit {
		return invalid("items", "at most %d, got %d", MaxLimit, len(q.IDs))
	}
	if count {
		return nil
	}
	return checkLimit(q.Limit)
}

// where returns the condition selecting q's items at now and its
// arguments, numbered from $1.
func (q QueueQuery) where(now time.Time) (string, []any) {
	args := []any{now}
	conds := []string{"$1::timestamptz IS NOT NULL"} // now, used by some conditions
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if q.Class != "" {
		conds = append(conds, "content_class = "+arg(q.Class))
	}
	if q.Reason != "" {
		conds = append(conds, "reason = "+arg(q.Reason))
	}
	if q.ClaimedBy != "" {
		conds = append(conds, "claimed_by = "+arg(q.ClaimedBy)+" AND claim_expires_at > $1")
	}
	switch q.Held {
	case HeldExcluded:
		conds = append(conds, "held_at IS NULL")
	case HeldOnly:
		conds = append(conds, "held_at IS NOT NULL")
	}
	if q.IDs != nil {
		conds = append(conds, "review_id = ANY("+arg(q.IDs)+")")
	}
	if q.Order == OrderID && q.After != "" {
		conds = append(conds, "review_id > "+arg(q.After))
	}
	return strings.Join(conds, " AND "), args
}

func (q QueueQuery) orderBy() string {
	switch q.Order {
	case OrderDue:
		return "priority DESC, due_at NULLS LAST, escalated_at, review_id"
	case OrderID:
		return "review_id"
	}
	return "priority DESC, escalated_at, review_id"
}

// ManualQueue returns up to q.Limit (1 to MaxLimit) reviews waiting for a
// moderator that q selects, in q's order. Claims are shown only while
// their lease is live at now.
func (db *DB) ManualQueue(ctx context.Context, q QueueQuery, now time.Time) (Queue, error) {
	return readFrom(ctx, db, func(db *DB) (Queue, error) { return db.manualQueue(ctx, q, now) })
}

func (db *DB) manualQueue(ctx context.Context, q QueueQuery, now time.Time) (Queue, error) {
	if err := q.check(false); err != nil {
		return Queue{}, err
	}
	where, args := q.where(now)
	args = append(args, q.Limit)
	rows, err := db.pool.Query(ctx, `SELECT review_id, content_class, reason, attempts, escalated_at,
			CASE WHEN claim_expires_at > $1 THEN claimed_by END, CASE WHEN claim_expires_at > $1 THEN claim_expires_at END,
			priority, version, required_approvals, approvers, round, due_at, claims, held_by, held_at, hold_note
		FROM manual_queue WHERE `+where+`
		ORDER BY `+q.orderBy()+fmt.Sprintf(` LIMIT $%d`, len(args)), args...)
	if err != nil {
		return Queue{}, storeerr.Wrap(ctx, "manual queue", err)
	}
	out := Queue{Items: []QueueItem{}, Now: now.UTC()}
	var (
		it      QueueItem
		version int64
	)
	_, err = pgx.ForEachRow(rows, []any{&it.ReviewID, &it.ContentClass, &it.Reason, &it.Attempts, &it.EscalatedAt,
		&it.ClaimedBy, &it.ClaimExpiresAt, &it.Priority, &version, &it.RequiredApprovals, &it.Approvers,
		&it.Round, &it.DueAt, &it.Claims, &it.HeldBy, &it.HeldAt, &it.HoldNote}, func() error {
		item := it
		item.Version = uint64(version)
		item.AgeSeconds = seconds(now.Sub(item.EscalatedAt))
		item.Approvers = nonNil(item.Approvers)
		item.Held = item.HeldAt != nil
		item.SLABreached = item.DueAt != nil && !now.Before(*item.DueAt)
		out.Items = append(out.Items, item)
		it = QueueItem{}
		return nil
	})
	if err != nil {
		return Queue{}, storeerr.Wrap(ctx, "manual queue", err)
	}
	return out, nil
}

// CountQueue returns how many manual-queue items q selects at now
// (q.Limit, q.Order and q.After are ignored).
func (db *DB) CountQueue(ctx context.Context, q QueueQuery, now time.Time) (int, error) {
	return readFrom(ctx, db, func(db *DB) (int, error) { return db.countQueue(ctx, q, now) })
}

func (db *DB) countQueue(ctx context.Context, q QueueQuery, now time.Time) (int, error) {
	if err := q.check(true); err != nil {
		return 0, err
	}
	q.After = ""
	where, args := q.where(now)
	var n int
	if err := db.pool.QueryRow(ctx, `SELECT count(*) FROM manual_queue WHERE `+where, args...).Scan(&n); err != nil {
		return 0, storeerr.Wrap(ctx, "count manual queue", err)
	}
	return n, nil
}

// ExpiredClaims returns up to limit reviews in the queue whose claim's
// lease ended before now and is not yet recorded as released.
func (db *DB) ExpiredClaims(ctx context.Context, now time.Time, limit int) ([]string, error) {
	rows, err := db.pool.Query(ctx, `SELECT review_id FROM manual_queue
		WHERE claim_expires_at IS NOT NULL AND claim_expires_at <= $1 ORDER BY claim_expires_at LIMIT $2`, now, limit)
	if err != nil {
		return nil, storeerr.Wrap(ctx, "expired claims", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, storeerr.Wrap(ctx, "expired claims", err)
	}
	return ids, nil
}

// Breach is an SLA breach the sweep counted.
type Breach struct {
	ReviewID, ContentClass string
	Round                  int
	DueAt                  time.Time
}

// CountBreaches records, once per review and round across every process,
// the queue items whose due time passed by now, and returns those it
// recorded now (none that another call recorded before).
func (db *DB) CountBreaches(ctx context.Context, now time.Time) ([]Breach, error) {
	rows, err := db.pool.Query(ctx, `INSERT INTO manual_sla_breach (review_id, round, content_class, due_at, counted_at)
		SELECT review_id, round, content_class, due_at, $1 FROM manual_queue WHERE due_at <= $1
		ON CONFLICT (review_id, round) DO NOTHING
		RETURNING review_id, content_class, round, due_at`, now)
	if err != nil {
		return nil, storeerr.Wrap(ctx, "count SLA breaches", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Breach, error) {
		var b Breach
		return b, r.Scan(&b.ReviewID, &b.ContentClass, &b.Round, &b.DueAt)
	})
	if err != nil {
		return nil, storeerr.Wrap(ctx, "count SLA breaches", err)
	}
	return out, nil
}

// ItemOf is the queue item of a review in manual_review as r stands, as
// ManualQueue would list it once projected (claims live at now).
func ItemOf(r *domain.Review, now time.Time) QueueItem {
	p := r.Policy()
	it := QueueItem{
		ReviewID: r.ID(), ContentClass: r.Class(), Reason: string(r.EscalationReason()), Attempts: r.Attempts(),
		EscalatedAt: r.EscalatedAt().UTC(), AgeSeconds: seconds(now.Sub(r.EscalatedAt())), Priority: p.Priority,
		Version: r.Version(), RequiredApprovals: p.RequiredApprovals(), Approvers: []string{}, Round: r.Round(),
		Claims: string(p.ClaimMode()),
	}
	for _, names := range r.Approvals() {
		it.Approvers = append(it.Approvers, names...)
	}
	if p.ManualSLA > 0 {
		due := it.EscalatedAt.Add(p.ManualSLA)
		it.DueAt, it.SLABreached = &due, !now.Before(due)
	}
	if c := r.CurrentClaim(); c.Live(now) {
		until := c.ExpiresAt.UTC()
		it.ClaimedBy, it.ClaimExpiresAt = &c.Moderator, &until
	}
	if h := r.Hold(); h != nil {
		at := h.At.UTC()
		it.Held, it.HeldBy, it.HeldAt, it.HoldNote = true, &h.By, &at, &h.Note
	}
	return it
}
