package pgwork_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/api/engine/work/pgwork"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// purges counts the purge's statements a pool runs.
type purges struct{ n atomic.Int64 }

func (p *purges) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if strings.Contains(data.SQL, "DELETE FROM review_payload") {
		p.n.Add(1)
	}
	return ctx
}

func (*purges) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestPurgeInBatches: the contents past the retention are deleted in
// statements of at most 10,000 until none is left; the content of a review
// still worked on and the content within the retention stay.
func TestPurgeInBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	counted := &purges{}
	pool := dbtest.PoolWith(t, func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = counted })
	cutoff := time.Now().Add(-time.Hour)
	for _, sql := range []string{
		`INSERT INTO review_payload (review_id, digest, content_type, content, stored_at)
			SELECT 'old-' || g, 'd', 'text/plain', '\x00', now() - interval '2 days' + g * interval '1 ms' FROM generate_series(1, 25003) AS g`,
		`INSERT INTO review_payload (review_id, digest, content_type, content, stored_at)
			SELECT 'new-' || g, 'd', 'text/plain', '\x00', now() FROM generate_series(1, 5) AS g`,
		`INSERT INTO review_work (review_id, deadline, due_at) SELECT 'old-' || g, now(), now() FROM generate_series(1, 3) AS g`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	n, err := pgwork.New(pool, nil).PurgePayloads(ctx, cutoff)
	if err != nil || n != 25000 {
		t.Fatalf("purged %d (%v), want the 25,000 past the retention with no work record", n, err)
	}
	if got := counted.n.Load(); got != 3 {
		t.Errorf("the purge ran %d statements, want 3 (10,000, 10,000 and 5,000)", got)
	}
	var left []string
	rows, _ := pool.Query(ctx, `SELECT review_id FROM review_payload ORDER BY review_id`)
	left, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if want := "new-1 new-2 new-3 new-4 new-5 old-1 old-2 old-3"; strings.Join(left, " ") != want {
		t.Fatalf("contents left %v, want %s", left, want)
	}
}
