// Package pgsession keeps the UI's sign-in sessions in PostgreSQL (the
// ui_session table), so that every API process knows every session.
package pgsession

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/api/signin"
)

// Store is a signin.Store on PostgreSQL.
type Store struct{ pool *pgxpool.Pool }

var _ signin.Store = (*Store)(nil)

// New returns the store on pool (migrated: ui_session, ui_session_key).
func New(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// Key implements signin.Store: the first process stores a random key,
// every process reads the stored one.
func (s *Store) Key(ctx context.Context) ([]byte, error) {
	fresh := make([]byte, 32)
	if _, err := rand.Read(fresh); err != nil {
		return nil, err
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO ui_session_key (id, key) VALUES (1, $1) ON CONFLICT (id) DO NOTHING`, fresh); err != nil {
		return nil, fmt.Errorf("session key: %w", err)
	}
	var key []byte
	if err := s.pool.QueryRow(ctx, `SELECT key FROM ui_session_key WHERE id = 1`).Scan(&key); err != nil {
		return nil, fmt.Errorf("session key: %w", err)
	}
	return key, nil
}

// Create implements signin.Store.
func (s *Store) Create(ctx context.Context, r signin.Record) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO ui_session
		(key, public_id, subject, name, roles, csrf, refresh_token, id_token, created_at, check_at, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
		r.Key, r.ID, r.Subject, r.Name, roles(r.Roles), r.CSRF, r.RefreshToken, r.IDToken, r.Created, r.CheckAt, expiry(r.Expiry))
	if err != nil {
		return fmt.Errorf("create session %s: %w", r.ID, err)
	}
	return nil
}

// Get implements signin.Store.
func (s *Store) Get(ctx context.Context, key string) (signin.Record, error) {
	r := signin.Record{Key: key}
	var exp *time.Time
	err := s.pool.QueryRow(ctx, `SELECT public_id, subject, name, roles, csrf, refresh_token, id_token, created_at, check_at, expires_at
		FROM ui_session WHERE key = $1`, key).
		Scan(&r.ID, &r.Subject, &r.Name, &r.Roles, &r.CSRF, &r.RefreshToken, &r.IDToken, &r.Created, &r.CheckAt, &exp)
	if errors.Is(err, pgx.ErrNoRows) {
		return signin.Record{}, signin.ErrNoSession
	}
	if err != nil {
		return signin.Record{}, fmt.Errorf("read session: %w", err)
	}
	if exp != nil {
		r.Expiry = *exp
	}
	if len(r.Roles) == 0 {
		r.Roles = nil
	}
	return r, nil
}

// Update implements signin.Store.
func (s *Store) Update(ctx context.Context, r signin.Record) error {
	tag, err := s.pool.Exec(ctx, `UPDATE ui_session SET name = $2, roles = $3, refresh_token = $4, id_token = $5, check_at = $6, expires_at = $7
		WHERE key = $1`, r.Key, r.Name, roles(r.Roles), r.RefreshToken, r.IDToken, r.CheckAt, expiry(r.Expiry))
	if err != nil {
		return fmt.Errorf("update session %s: %w", r.ID, err)
	}
	if tag.RowsAffected() == 0 {
		return signin.ErrNoSession
	}
	return nil
}

// Delete implements signin.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM ui_session WHERE key = $1`, key); err != nil {
		return fmt.Errorf("delete session: %w", err)
	}
	return nil
}

// Sweep implements signin.Store.
func (s *Store) Sweep(ctx context.Context, t time.Time) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM ui_session WHERE created_at < $1`, t); err != nil {
		return fmt.Errorf("sweep sessions: %w", err)
	}
	return nil
}

func roles(r []string) []string {
	if r == nil {
		return []string{}
	}
	return r
}

func expiry(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
