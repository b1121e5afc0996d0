package pgstore

import (
	"context"
	"time"

	"github.com/reviewledger/reviewledger/eventstore/storeerr"
)

// Stall describes how far the global order is held back: events committed
// but not yet returned by ReadAll because an older transaction, in any
// database of the server, is still running.
type Stall struct {
	// HeldBack is the number of committed events ReadAll cannot return yet.
	HeldBack int64
	// Oldest is the age of the oldest of them (since its RecordedAt); zero
	// when none is held back. This is the delay readers see now.
	Oldest time.Duration
	// XIDSpan is the distance between the oldest running transaction and the
	// next transaction ID: how many transactions the hold-up spans.
	XIDSpan uint64
}

// Stall measures the hold-up of the global order, for a gauge. It is cheap
// while little is held back; its cost grows with HeldBack.
func (s *Store) Stall(ctx context.Context) (Stall, error) {
	var (
		st      Stall
		seconds float64
		span    int64
	)
	err := s.pool.QueryRow(ctx, `
		SELECT count(*),
			coalesce(extract(epoch FROM now() - min(recorded_at)), 0)::float8,
			(pg_snapshot_xmax(pg_current_snapshot())::text::bigint - pg_snapshot_xmin(pg_current_snapshot())::text::bigint)
		FROM event WHERE xid >= pg_snapshot_xmin(pg_current_snapshot())`).Scan(&st.HeldBack, &seconds, &span)
	if err != nil {
		return Stall{}, storeerr.Wrap(ctx, "measure stall", err)
	}
	if seconds > 0 {
		st.Oldest = time.Duration(seconds * float64(time.Second))
	}
	st.XIDSpan = uint64(max(span, 0))
	return st, nil
}
