// Package contentaccess records every read of a review's raw content in
// PostgreSQL (the content_access table) and reads the record back for
// auditors: per review, and as an export of a time range.
package contentaccess

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Outcomes of a read that is recorded.
const (
	OutcomeServed = "served" // the content was sent
	OutcomePurged = "purged" // the review exists, its content was purged (410)
)

// Access is one read of a review's content.
type Access struct {
	ReviewID string    `json:"review_id"`
	At       time.Time `json:"at"`
	// Subject is the provider's stable subject, or a static token's name.
	Subject     string `json:"subject"`
	DisplayName string `json:"display_name"`
	// Actor is the name the ledger records for this principal.
	Actor string `json:"actor"`
	Role  string `json:"role"`
	// Via is token, jwt or session; Credential names it (a token's name,
	// a JWT's jti, a session's public ID), never a secret.
	Via        string `json:"via"`
	Credential string `json:"credential"`
	RequestID  string `json:"request_id"`
	Outcome    string `json:"outcome"`
}

// Columns are the CSV export's header, in the order of Access.Record.
var Columns = []string{"review_id", "at", "subject", "display_name", "actor", "role", "via", "credential", "request_id", "outcome"}

// Record is the access as a CSV row, in the order of Columns.
func (a Access) Record() []string {
	return []string{a.ReviewID, a.At.UTC().Format(time.RFC3339Nano), a.Subject, a.DisplayName, a.Actor, a.Role, a.Via, a.Credential, a.RequestID, a.Outcome}
}

// DB is the content_access table.
type DB struct{ pool *pgxpool.Pool }

// New returns the table on pool.
func New(pool *pgxpool.Pool) *DB { return &DB{pool: pool} }

// Record inserts an access. The content is sent only once it returns nil.
func (db *DB) Record(ctx context.Context, a Access) error {
	_, err := db.pool.Exec(ctx, `INSERT INTO content_access
		(review_id, at, subject, display_name, actor, role, via, credential, request_id, outcome)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
		a.ReviewID, a.At, a.Subject, a.DisplayName, a.Actor, a.Role, a.Via, a.Credential, a.RequestID, a.Outcome)
	if err != nil {
		return fmt.Errorf("record content access to %q: %w", a.ReviewID, err)
	}
	return nil
}

const columns = `review_id, at, subject, display_name, actor, role, via, credential, request_id, outcome`

// ForReview lists the accesses to a review's content, oldest first.
func (db *DB) ForReview(ctx context.Context, reviewID string) ([]Access, error) {
	rows, err := db.pool.Query(ctx, `SELECT `+columns+` FROM content_access WHERE review_id = $1 ORDER BY at, id`, reviewID)
	if err != nil {
		return nil, fmt.Errorf("content accesses of %q: %w", reviewID, err)
	}
	out, err := pgx.CollectRows(rows, scan)
	if err != nil {
		return nil, fmt.Errorf("content accesses of %q: %w", reviewID, err)
	}
	return out, nil
}

// Between calls fn with every access at or after from and before to,
// oldest first, as the rows arrive (an export is never held in memory).
// An error of fn stops the read and is returned.
func (db *DB) Between(ctx context.Context, from, to time.Time, fn func(Access) error) error {
	rows, err := db.pool.Query(ctx, `SELECT `+columns+` FROM content_access WHERE at >= $1 AND at < $2 ORDER BY at, id`, from, to)
	if err != nil {
		return fmt.Errorf("content accesses from %s to %s: %w", from, to, err)
	}
	defer rows.Close()
	for rows.Next() {
		a, err := scan(rows)
		if err != nil {
			return err
		}
		if err := fn(a); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("content accesses from %s to %s: %w", from, to, err)
	}
	return nil
}

func scan(row pgx.CollectableRow) (Access, error) {
	var a Access
	err := row.Scan(&a.ReviewID, &a.At, &a.Subject, &a.DisplayName, &a.Actor, &a.Role, &a.Via, &a.Credential, &a.RequestID, &a.Outcome)
	a.At = a.At.UTC()
	return a, err
}
