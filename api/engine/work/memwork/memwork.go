// Package memwork is the engine's storage in memory, over any event store
// (memstore in tests): work records, content and callback deliveries in
// maps, a commit's effects applied under the same lock as its append, so
// no reader sees one without the other. For tests and demos; nothing
// survives the process.
package memwork

import (
	"context"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/reviewledger/reviewledger/api/engine/work"
	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

var _ work.Store = (*Store)(nil)

// Store is work.Store in memory.
type Store struct {
	events eventstore.Store

	mu         sync.Mutex
	records    map[string]*work.Record
	payloads   map[string]storedPayload
	deliveries map[deliveryKey]delivery
}

type storedPayload struct {
	work.Payload
	at time.Time
}

type deliveryKey struct{ webhookID, reviewID string }

type delivery struct {
	outcome string
	at      time.Time
}

// New returns an empty store whose commits append to events.
func New(events eventstore.Store) *Store {
	return &Store{events: events, records: map[string]*work.Record{}, payloads: map[string]storedPayload{}, deliveries: map[deliveryKey]delivery{}}
}

// Atomic implements work.Store: effects are applied under the append's lock.
func (s *Store) Atomic() bool { return true }

// Commit implements ledger.Committer: the appends, then each written
// stream's Change, under the store's lock.
func (s *Store) Commit(ctx context.Context, appends []eventstore.StreamAppend, effects []*work.Change) ([]eventstore.StreamResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	results, err := s.events.AppendMulti(ctx, appends...)
	if err != nil {
		return nil, err
	}
	for i, r := range results {
		if c := effects[i]; c != nil && r.Err == nil {
			s.apply(*c)
		}
	}
	return results, nil
}

func (s *Store) apply(c work.Change) {
	switch c.Op {
	case work.Create:
		s.payloads[c.ReviewID] = storedPayload{Payload: clonePayload(c.Payload), at: c.At}
		rec := &work.Record{ReviewID: c.ReviewID, Deadline: c.Deadline, DueAt: c.At, Owner: c.Owner}
		if c.Owner != "" {
			rec.LeaseUntil = c.LeaseUntil
		}
		s.records[c.ReviewID] = rec
	case work.Park:
		s.park(c.Owner, c.ReviewID, c.Until, c.Awaiting)
	case work.Release:
		delete(s.records, c.ReviewID)
	case work.Reopen:
		s.records[c.ReviewID] = &work.Record{ReviewID: c.ReviewID, Deadline: c.Deadline, DueAt: c.At}
	}
}

func (s *Store) park(owner, id string, until time.Time, awaiting int) {
	if r := s.records[id]; r != nil && r.Owner == owner {
		r.DueAt, r.Awaiting, r.Owner, r.LeaseUntil = until, awaiting, "", time.Time{}
	}
}

// Claim implements work.Store.
func (s *Store) Claim(_ context.Context, q work.Query) ([]work.Claimed, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	if q.IDs != nil {
		ids = slices.Clone(q.IDs)
	} else {
		for id := range s.records {
			ids = append(ids, id)
		}
	}
	var picked []*work.Record
	for _, id := range ids {
		r := s.records[id]
		if r == nil || (r.Owner != "" && !r.LeaseUntil.Before(q.Now)) {
			continue
		}
		if q.DeadlineBefore.IsZero() && r.DueAt.After(q.Now) || !q.DeadlineBefore.IsZero() && !r.Deadline.Before(q.DeadlineBefore) {
			continue
		}
		picked = append(picked, r)
	}
	sort.Slice(picked, func(i, j int) bool { return picked[i].DueAt.Before(picked[j].DueAt) })
	if q.Limit > 0 && len(picked) > q.Limit {
		picked = picked[:q.Limit]
	}
	out := make([]work.Claimed, len(picked))
	for i, r := range picked {
		r.Owner, r.LeaseUntil = q.Owner, q.LeaseUntil
		out[i] = work.Claimed{Record: *r}
		if p, ok := s.payloads[r.ReviewID]; ok {
			pl := clonePayload(p.Payload)
			out[i].Payload = &pl
		}
	}
	return out, nil
}

// Renew implements work.Store.
func (s *Store) Renew(_ context.Context, owner string, reviewIDs []string, until time.Time) ([]string, []string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for _, id := range reviewIDs {
		if r := s.records[id]; r != nil && r.Owner == owner {
			r.LeaseUntil = until
			ids = append(ids, id)
		}
	}
	return ids, slices.Clone(ids), nil
}

// Park implements work.Store.
func (s *Store) Park(_ context.Context, owner, reviewID string, until time.Time, awaiting int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.park(owner, reviewID, until, awaiting)
	return nil
}

// Release implements work.Store.
func (s *Store) Release(_ context.Context, owner string, reviewIDs []string, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, r := range s.records {
		if r.Owner == owner && (reviewIDs == nil || slices.Contains(reviewIDs, id)) {
			r.Owner, r.LeaseUntil = "", time.Time{}
			r.DueAt = minTime(r.DueAt, now)
		}
	}
	return nil
}

// Ensure implements work.Store.
func (s *Store) Ensure(_ context.Context, reviewID string, deadline, now time.Time) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.records[reviewID] != nil {
		return false, nil
	}
	s.records[reviewID] = &work.Record{ReviewID: reviewID, Deadline: deadline, DueAt: now}
	return true, nil
}

// Done implements work.Store.
func (s *Store) Done(_ context.Context, reviewID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.records, reviewID)
	return nil
}

// Count implements work.Store.
func (s *Store) Count(context.Context) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.records), nil
}

// Record returns a review's work record, for tests.
func (s *Store) Record(reviewID string) (work.Record, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.records[reviewID]
	if r == nil {
		return work.Record{}, false
	}
	return *r, true
}

// Payload implements work.Store.
func (s *Store) Payload(_ context.Context, reviewID string) (work.Payload, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.payloads[reviewID]
	if !ok {
		return work.Payload{}, work.ErrPayloadMissing
	}
	return clonePayload(p.Payload), nil
}

// DeletePayload removes a review's content, as a purge or a crash would.
func (s *Store) DeletePayload(reviewID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.payloads, reviewID)
}

// PurgePayloads implements work.Store.
func (s *Store) PurgePayloads(_ context.Context, cutoff time.Time) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for id, p := range s.payloads {
		if p.at.Before(cutoff) && s.records[id] == nil {
			delete(s.payloads, id)
			n++
		}
	}
	return n, nil
}

// SeeDelivery implements work.Store.
func (s *Store) SeeDelivery(_ context.Context, webhookID, reviewID string, now time.Time) (bool, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := deliveryKey{webhookID, reviewID}
	if d, ok := s.deliveries[k]; ok {
		return false, d.outcome, nil
	}
	s.deliveries[k] = delivery{at: now}
	return true, "", nil
}

// SetDeliveryOutcome implements work.Store.
func (s *Store) SetDeliveryOutcome(_ context.Context, webhookID, reviewID, outcome string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := deliveryKey{webhookID, reviewID}
	if d, ok := s.deliveries[k]; ok {
		d.outcome = outcome
		s.deliveries[k] = d
	}
	return nil
}

// ForgetDelivery implements work.Store.
func (s *Store) ForgetDelivery(_ context.Context, webhookID, reviewID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := deliveryKey{webhookID, reviewID}
	if d, ok := s.deliveries[k]; ok && d.outcome == "" {
		delete(s.deliveries, k)
	}
	return nil
}

// PurgeDeliveries implements work.Store.
func (s *Store) PurgeDeliveries(_ context.Context, cutoff time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, d := range s.deliveries {
		if d.at.Before(cutoff) {
			delete(s.deliveries, id)
		}
	}
	return nil
}

func clonePayload(p work.Payload) work.Payload {
	p.Content = slices.Clone(p.Content)
	if p.Content == nil {
		p.Content = []byte{}
	}
	return p
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// Ledger returns a ledger over the store's events that commits through the
// store, so that a review's events and its work record change together.
func (s *Store) Ledger(gc ledger.GroupCommit) *ledger.Ledger {
	return ledger.New(s.events, ledger.Options{Committer: s, GroupCommit: gc})
}
