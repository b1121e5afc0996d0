package projections

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/pgstore/pgarray"
	"github.com/reviewledger/reviewledger/eventstore/storeerr"
)

// summaryProjection keeps review_summary: one row per review, the state the
// aggregate would have after the same events.
type summaryProjection struct{}

func (summaryProjection) name() string     { return ReviewSummary }
func (summaryProjection) version() int     { return 1 }
func (summaryProjection) tables() []string { return []string{"review_summary"} }

// uses: every event of the review's own stream moves its row (version and
// updated_at at least); the events of its side streams (conflicting
// completions, shadow observations) change nothing in it.
func (summaryProjection) uses(e event) bool { return !isSide(e) }

type summaryRow struct {
	reviewID         string
	class            string
	state            domain.State
	attempts         int
	version          int64
	submittedAt      time.Time
	deadline         time.Time
	decidedAt        *time.Time
	decidedBy        *string
	reasons          []string
	escalationReason *string
	escalatedAt      *time.Time
	humanGate        bool
	updatedAt        time.Time
}

const summaryColumns = `review_id, content_class, state, attempts, version, submitted_at, deadline,
	decided_at, decided_by, reasons, escalation_reason, escalated_at, human_gate, updated_at`

func (p summaryProjection) apply(ctx context.Context, tx pgx.Tx, t tableSet, events []event) error {
	rows, err := loadSummaries(ctx, tx, t, reviewIDs(events))
	if err != nil {
		return err
	}
	changed := make(map[string]*summaryRow)
	var order []string
	for _, e := range events {
		row := rows[e.reviewID]
		if row != nil && int64(e.revision) <= row.version {
			continue // already applied
		}
		row = applySummary(row, e)
		if row == nil {
			continue
		}
		rows[e.reviewID] = row
		if _, ok := changed[e.reviewID]; !ok {
			order = append(order, e.reviewID)
		}
		changed[e.reviewID] = row
	}
	return writeSummaries(ctx, tx, t, order, changed)
}

// applySummary returns row moved forward by e; nil when e opens nothing and
// the review is unknown.
func applySummary(row *summaryRow, e event) *summaryRow {
	if s, ok := e.data.(domain.Submitted); ok {
		if row != nil {
			return row
		}
		return &summaryRow{
			reviewID: e.reviewID, class: s.ContentClass, state: domain.StatePending,
			version: int64(e.revision), submittedAt: s.SubmittedAt, deadline: s.Deadline,
			reasons: []string{}, humanGate: s.Policy.HumanGate, updatedAt: e.recordedAt,
		}
	}
	if row == nil {
		return nil
	}
	switch d := e.data.(type) {
	case domain.AttemptStarted:
		row.attempts = d.Attempt
	case domain.FindingReceived:
		row.reasons = nonNil(d.Reasons)
		if !domain.HeldByGate(row.humanGate, d.State) {
			row.state = domain.State(d.State)
			row.decidedAt = ptr(d.ReceivedAt)
			row.decidedBy = ptr("provider")
		}
	case domain.Escalated:
		row.state = d.State
		row.escalationReason = ptr(string(d.Reason))
		row.escalatedAt = ptr(d.At)
		if d.State == domain.StateRejected {
			row.decidedAt = ptr(d.At)
			row.decidedBy = ptr("policy")
			row.reasons = []string{"fail_closed:" + string(d.Reason)}
		}
	case domain.ManualDecisionRecorded:
		row.state = domain.State(d.State)
		row.decidedAt = ptr(d.At)
		row.decidedBy = ptr(d.Moderator)
		if d.Note != "" {
			row.reasons = []string{d.Note}
		}
	case domain.Requeued:
		// As the aggregate: pending again with the round's deadline, the
		// last escalation and its reasons cleared.
		row.state = domain.StatePending
		row.deadline = d.Deadline
		row.escalationReason, row.escalatedAt = nil, nil
		row.reasons = []string{}
	}
	row.version = int64(e.revision)
	row.updatedAt = e.recordedAt
	return row
}

func loadSummaries(ctx context.Context, tx pgx.Tx, t tableSet, ids []string) (map[string]*summaryRow, error) {
	out := make(map[string]*summaryRow, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := tx.Query(ctx, `SELECT `+summaryColumns+` FROM `+t.name("review_summary")+` WHERE review_id = ANY($1)`, ids)
	if err != nil {
		return nil, storeerr.Wrap(ctx, "load review_summary", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			r       summaryRow
			state   string
			reasons []byte
		)
		if err := rows.Scan(&r.reviewID, &r.class, &state, &r.attempts, &r.version, &r.submittedAt, &r.deadline,
			&r.decidedAt, &r.decidedBy, &reasons, &r.escalationReason, &r.escalatedAt, &r.humanGate, &r.updatedAt); err != nil {
			return nil, storeerr.Wrap(ctx, "load review_summary", err)
		}
		r.state = domain.State(state)
		if err := json.Unmarshal(reasons, &r.reasons); err != nil {
			return nil, fmt.Errorf("load review_summary %s: reasons: %w", r.reviewID, err)
		}
		out[r.reviewID] = &r
	}
	if err := rows.Err(); err != nil {
		return nil, storeerr.Wrap(ctx, "load review_summary", err)
	}
	return out, nil
}

func writeSummaries(ctx context.Context, tx pgx.Tx, t tableSet, order []string, rows map[string]*summaryRow) error {
	if len(order) == 0 {
		return nil
	}
	n := len(order)
	var (
		ids, classes, states        = make(pgarray.Text, n), make(pgarray.Text, n), make(pgarray.Text, n)
		attempts                    = make(pgarray.Int4, n)
		versions                    = make(pgarray.Int8, n)
		submitted, deadlines, upd   = make(pgarray.Timestamptz, n), make(pgarray.Timestamptz, n), make(pgarray.Timestamptz, n)
		decidedAt, escalatedAt      = make(pgarray.Of[pgtype.Timestamptz], n), make(pgarray.Of[pgtype.Timestamptz], n)
		decidedBy, escalationReason = make(pgarray.Of[pgtype.Text], n), make(pgarray.Of[pgtype.Text], n)
		reasons                     = make(pgarray.Text, n)
		humanGate                   = make([]bool, n)
	)
	for i, id := range order {
		r := rows[id]
		b, err := json.Marshal(nonNil(r.reasons))
		if err != nil {
			return storeerr.Wrap(ctx, "write review_summary "+id, err)
		}
		ids[i], classes[i], states[i] = r.reviewID, r.class, string(r.state)
		attempts[i], versions[i] = int32(r.attempts), r.version
		submitted[i], deadlines[i], upd[i] = r.submittedAt, r.deadline, r.updatedAt
		decidedAt[i], decidedBy[i], reasons[i] = nullTime(r.decidedAt), nullText(r.decidedBy), string(b)
		escalationReason[i], escalatedAt[i], humanGate[i] = nullText(r.escalationReason), nullTime(r.escalatedAt), r.humanGate
	}
	_, err := tx.Exec(ctx, `INSERT INTO `+t.name("review_summary")+` (`+summaryColumns+`)
		SELECT u.id, u.class, u.state, u.attempts, u.version, u.submitted, u.deadline,
			u.decided_at, u.decided_by, u.reasons::jsonb, u.escalation_reason, u.escalated_at, u.human_gate, u.updated
		FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::bigint[], $6::timestamptz[], $7::timestamptz[],
			$8::timestamptz[], $9::text[], $10::text[], $11::text[], $12::timestamptz[], $13::bool[], $14::timestamptz[])
			AS u(id, class, state, attempts, version, submitted, deadline, decided_at, decided_by, reasons,
				escalation_reason, escalated_at, human_gate, updated)
		ON CONFLICT (review_id) DO UPDATE SET
			content_class = EXCLUDED.content_class, state = EXCLUDED.state, attempts = EXCLUDED.attempts,
			version = EXCLUDED.version, submitted_at = EXCLUDED.submitted_at, deadline = EXCLUDED.deadline,
			decided_at = EXCLUDED.decided_at, decided_by = EXCLUDED.decided_by, reasons = EXCLUDED.reasons,
			escalation_reason = EXCLUDED.escalation_reason, escalated_at = EXCLUDED.escalated_at,
			human_gate = EXCLUDED.human_gate, updated_at = EXCLUDED.updated_at`,
		ids, classes, states, attempts, versions, submitted, deadlines,
		decidedAt, decidedBy, reasons, escalationReason, escalatedAt, humanGate, upd)
	if err != nil {
		return storeerr.Wrap(ctx, "write review_summary", err)
	}
	return nil
}

func ptr[T any](v T) *T { return &v }

// nullTime is t as a timestamptz parameter, NULL for nil.
func nullTime(t *time.Time) pgtype.Timestamptz {
	if t == nil {
		return pgtype.Timestamptz{}
	}
	return pgtype.Timestamptz{Time: *t, Valid: true}
}

// nullText is s as a text parameter, NULL for nil.
func nullText(s *string) pgtype.Text {
	if s == nil {
		return pgtype.Text{}
	}
	return pgtype.Text{String: *s, Valid: true}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
