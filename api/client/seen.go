package client

import (
	"context"
	"sync"
	"time"
)

// SeenStore remembers the webhooks a Receiver handled.
type SeenStore interface {
	// Seen reports whether id was marked and not forgotten since.
	Seen(ctx context.Context, id string) (bool, error)
	// Mark remembers id as handled.
	Mark(ctx context.Context, id string) error
}

// MemorySeen is a SeenStore in memory: each ID is forgotten ttl after it
// was marked. Keep ttl longer than reviewledger retries a webhook
// (REVIEWLEDGER_NOTIFY_RETRY_FOR, 24h by default), or a late redelivery is
// handled twice. It holds one entry per webhook of the last ttl.
type MemorySeen struct {
	ttl time.Duration
	now func() time.Time

	mu    sync.Mutex
	until map[string]time.Time
	order []seenEntry // in marking order, so in expiry order
}

type seenEntry struct {
	id    string
	until time.Time
}

var _ SeenStore = (*MemorySeen)(nil)

// NewMemorySeen returns an empty store forgetting IDs after ttl.
func NewMemorySeen(ttl time.Duration) *MemorySeen {
	return &MemorySeen{ttl: ttl, now: time.Now, until: map[string]time.Time{}}
}

// Seen implements SeenStore.
func (m *MemorySeen) Seen(_ context.Context, id string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	until, ok := m.until[id]
	return ok && m.now().Before(until), nil
}

// Mark implements SeenStore; it forgets the IDs whose time is up.
func (m *MemorySeen) Mark(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	for len(m.order) > 0 && !now.Before(m.order[0].until) {
		e := m.order[0]
		if m.until[e.id].Equal(e.until) {
			delete(m.until, e.id)
		}
		m.order = m.order[1:]
	}
	until := now.Add(m.ttl)
	m.until[id] = until
	m.order = append(m.order, seenEntry{id: id, until: until})
	return nil
}

// Len returns how many IDs the store holds.
func (m *MemorySeen) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.until)
}
