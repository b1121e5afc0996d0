package runner

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/pgstore"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// BenchmarkReviewThroughput measures whole reviews per second through
// Submit, dispatch, one attempt against a provider that answers at once,
// and the conditional commit, on PostgreSQL. One op is one review.
func BenchmarkReviewThroughput(b *testing.B) {
	for _, backend := range []string{PubSubGoChannel, PubSubPostgres} {
		b.Run(backend, func(b *testing.B) {
			pool := dbtest.Pool(b)
			store := pgstore.New(pool, pgstore.Config{})
			defer store.Close()
			svc, err := New(Config{Policy: fastPolicy(), Ledger: ledger.New(store), Pool: pool, Provider: &instant{},
				Workers: 16, PubSub: backend, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- svc.Run(ctx) }()
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for i := 0; pb.Next(); i++ {
					id := fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), i)
					if _, _, err := svc.Submit(ctx, SubmitRequest{ReviewID: id, ContentClass: "fast", Content: []byte(id)}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			for {
				var left int
				if err := pool.QueryRow(ctx, `SELECT count(*) FROM runner_pending`).Scan(&left); err != nil {
					b.Fatal(err)
				}
				if left == 0 {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "reviews/s")
			b.StopTimer()
			cancel()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}
