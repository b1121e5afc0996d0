package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// BenchmarkReviewThroughput measures whole reviews per second through
// Submit, one attempt against a provider that answers at once and the
// conditional commit, on PostgreSQL, the engine running. One op is one
// review.
func BenchmarkReviewThroughput(b *testing.B) {
	for _, backend := range []string{PubSubGoChannel, PubSubPostgres} {
		b.Run(backend, func(b *testing.B) {
			ctx := context.Background()
			e, _, closeE, err := pgEngine(ctx, dbtest.URL(b), &instant{}, func(c *Config) {
				c.Policy, c.PubSub, c.Logger = fastPolicy(), backend, testLogger()
			})
			if err != nil {
				b.Fatal(err)
			}
			defer closeE()
			runCtx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- e.Run(runCtx) }()
			b.ResetTimer()
			start := time.Now()
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				for i := 0; pb.Next(); i++ {
					id := fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), i)
					if _, _, err := e.Submit(ctx, SubmitRequest{ReviewID: id, ContentClass: "fast", Content: []byte(id)}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			for {
				left, err := e.store.Count(ctx)
				if err != nil {
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
