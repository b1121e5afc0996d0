package projections

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Summary is a row of review_summary as the tests compare it with the
// aggregate. Nothing in the service reads review_summary row by row (the
// API reads reviews from the ledger), so this query lives with the tests.
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

// summary reads one review's row; ok is false when there is none.
func (e *env) summary(t *testing.T, reviewID string) (s Summary, ok bool) {
	t.Helper()
	var (
		version int64
		reasons []byte
	)
	err := e.pool.QueryRow(context.Background(), `SELECT review_id, state, content_class, attempts, version, submitted_at,
			deadline, decided_at, decided_by, reasons, escalation_reason, escalated_at, updated_at
		FROM review_summary WHERE review_id = $1`, reviewID).Scan(&s.ReviewID, &s.State, &s.ContentClass, &s.Attempts,
		&version, &s.SubmittedAt, &s.Deadline, &s.DecidedAt, &s.DecidedBy, &reasons, &s.EscalationReason, &s.EscalatedAt, &s.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Summary{}, false
	}
	if err != nil {
		t.Fatalf("read review_summary %s: %v", reviewID, err)
	}
	s.Version = uint64(version)
	if err := json.Unmarshal(reasons, &s.Reasons); err != nil {
		t.Fatalf("reasons of %s: %v", reviewID, err)
	}
	s.Reasons = nonNil(s.Reasons)
	return s, true
}
