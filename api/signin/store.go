package signin

import (
	"context"
	"crypto/rand"
	"slices"
	"sync"
	"time"
)

// Record is a session as a Store keeps it.
type Record struct {
	// Key is the SHA-256 (hex) of the cookie's random ID: a store never
	// holds what the browser presents.
	Key string
	// ID is the session's public ID (Session.ID).
	ID      string
	Subject string
	Name    string
	Roles   []string
	CSRF    string
	// RefreshToken and IDToken are the provider's: the refresh token
	// renews the session, the ID token is the hint of an RP-initiated
	// sign-out.
	RefreshToken string
	IDToken      string
	Created      time.Time
	// CheckAt: from then on the next use refreshes the session at the
	// provider. Expiry is the ID token's.
	CheckAt time.Time
	Expiry  time.Time
}

// Store keeps the UI's sessions: in memory (NewMemoryStore, one process)
// or shared by every API process (pgsession.Store).
type Store interface {
	// Key returns the key signing the sign-in cookies, the same for every
	// process sharing the store; made on first use.
	Key(ctx context.Context) ([]byte, error)
	// Create stores a new session.
	Create(ctx context.Context, r Record) error
	// Get returns the session of key; ErrNoSession when there is none.
	Get(ctx context.Context, key string) (Record, error)
	// Update replaces a session after a refresh; ErrNoSession when it was
	// deleted meanwhile.
	Update(ctx context.Context, r Record) error
	// Delete removes a session; deleting one that is gone is no error.
	Delete(ctx context.Context, key string) error
	// Sweep removes the sessions created before t.
	Sweep(ctx context.Context, t time.Time) error
}

// MemoryStore keeps sessions in this process.
type MemoryStore struct {
	once sync.Once
	key  []byte

	mu       sync.Mutex
	sessions map[string]Record
}

// NewMemoryStore returns an empty store with a random signing key.
func NewMemoryStore() *MemoryStore { return &MemoryStore{sessions: map[string]Record{}} }

var _ Store = (*MemoryStore)(nil)

// Key implements Store.
func (m *MemoryStore) Key(context.Context) ([]byte, error) {
	m.once.Do(func() {
		m.key = make([]byte, 32)
		_, _ = rand.Read(m.key) // never fails (crypto/rand)
	})
	return m.key, nil
}

// Create implements Store.
func (m *MemoryStore) Create(_ context.Context, r Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r.Roles = slices.Clone(r.Roles)
	m.sessions[r.Key] = r
	return nil
}

// Get implements Store.
func (m *MemoryStore) Get(_ context.Context, key string) (Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.sessions[key]
	if !ok {
		return Record{}, ErrNoSession
	}
	r.Roles = slices.Clone(r.Roles)
	return r, nil
}

// Update implements Store.
func (m *MemoryStore) Update(_ context.Context, r Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.sessions[r.Key]; !ok {
		return ErrNoSession
	}
	r.Roles = slices.Clone(r.Roles)
	m.sessions[r.Key] = r
	return nil
}

// Delete implements Store.
func (m *MemoryStore) Delete(_ context.Context, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.sessions, key)
	return nil
}

// Sweep implements Store.
func (m *MemoryStore) Sweep(_ context.Context, t time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, r := range m.sessions {
		if r.Created.Before(t) {
			delete(m.sessions, k)
		}
	}
	return nil
}
