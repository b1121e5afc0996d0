package ledger

import (
	"context"
	"errors"
	"fmt"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore"
)

// UnsureError is an append whose outcome the ledger could not learn: the
// batch it was in failed as a whole (a connection lost, a timeout, a
// statement of another stream's transaction), or its caller's context
// ended while it was being written. Its events may be stored. Writing the
// same review again from the snapshot it was made on would then fail its
// check against this very write (the events of a new append have new
// IDs), and look like another writer's: Landed says which it is. It wraps
// the error it stands for (errors.Is finds a context's end or
// eventstore.ErrUnavailable through it).
type UnsureError struct {
	ReviewID string
	first    uint64   // revision of the write's first event
	ids      []string // its events' IDs
	err      error
	// done is the outcome of the batch still being written when the
	// caller's context ended; nil once received, or when the batch ended.
	done <-chan outcome
}

// Revisions are the revisions the write gave its events, first to last.
func (e *UnsureError) Revisions() (first, last uint64) {
	return e.first, e.first + uint64(len(e.ids)) - 1
}

func (e *UnsureError) Error() string { return e.err.Error() + " (the append may have been written)" }
func (e *UnsureError) Unwrap() error { return e.err }

// errUnsure marks the group commit's outcomes that leave a write unsure;
// Ledger.write makes them an UnsureError. done is the outcome to come of
// a batch still being written.
type errUnsure struct {
	err  error
	done <-chan outcome
}

func (e errUnsure) Error() string { return e.err.Error() }
func (e errUnsure) Unwrap() error { return e.err }

// unsure is err as an *UnsureError of the write of data at first, when the
// group commit left it unsure; err otherwise.
func unsure(err error, reviewID string, first uint64, data []eventstore.EventData) error {
	var u errUnsure
	if !errors.As(err, &u) {
		return err
	}
	ids := make([]string, len(data))
	for i, d := range data {
		ids[i] = d.ID
	}
	return &UnsureError{ReviewID: reviewID, first: first, ids: ids, err: u.err, done: u.done}
}

// Landed reads the review of u as stored now, and reports whether u's
// write is in it: its events at the revisions it gave them. A batch still
// being written is waited for first (up to the group commit's Timeout,
// or ctx's end: then the error is ctx's, and Landed may be asked again).
// Not for concurrent use on one u.
func (l *Ledger) Landed(ctx context.Context, u *UnsureError) (*Snapshot, bool, error) {
	if u.done != nil {
		select {
		case <-u.done:
			u.done = nil
		case <-ctx.Done():
			return nil, false, fmt.Errorf("review %q: wait for its write's batch: %w", u.ReviewID, ctx.Err())
		}
	}
	snap, err := l.Load(ctx, u.ReviewID)
	if errors.Is(err, domain.ErrReviewNotFound) && u.first == 0 {
		return nil, false, nil // a creation that did not land
	}
	if err != nil {
		return nil, false, err
	}
	if !snap.Exists() || snap.Version() < u.first+uint64(len(u.ids))-1 {
		return snap, false, nil
	}
	recs, err := l.store.ReadStream(ctx, domain.StreamName(u.ReviewID), u.first)
	if err != nil {
		return nil, false, fmt.Errorf("read review %q: %w", u.ReviewID, err)
	}
	if len(recs) < len(u.ids) {
		return snap, false, nil
	}
	for i, id := range u.ids {
		if recs[i].Revision != u.first+uint64(i) || recs[i].ID != id {
			return snap, false, nil
		}
	}
	return snap, true, nil
}
