package pgstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/eventstoretest"
	"github.com/reviewledger/reviewledger/eventstore/pgstore"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// multiStreams is how many streams one op of BenchmarkAppendMulti appends
// to, one event each; multiConns the size of its pool.
const multiStreams, multiConns = 64, 16

// BenchmarkAppendMulti appends one event to each of 64 streams per op, three
// ways, in one database:
//
//   - Sequential: 64 Appends one after another;
//   - Concurrent: 64 Appends at once, from 64 goroutines sharing a pool of
//     16 connections;
//   - AppendMulti: one AppendMulti of the 64 streams.
//
// Every stream is at Exact(n) after the first op. ns/op is per 64 events;
// events/s is reported too.
func BenchmarkAppendMulti(b *testing.B) {
	url := dbtest.URL(b)
	b.Run("Sequential", benchMulti(url, func(ctx context.Context, s *pgstore.Store, appends []eventstore.StreamAppend) ([]eventstore.StreamResult, error) {
		results := make([]eventstore.StreamResult, len(appends))
		for i, a := range appends {
			res, err := s.Append(ctx, a.Stream, a.Expected, a.Events...)
			if err != nil {
				return nil, err
			}
			results[i].AppendResult = res
		}
		return results, nil
	}))
	b.Run("Concurrent", benchMulti(url, func(ctx context.Context, s *pgstore.Store, appends []eventstore.StreamAppend) ([]eventstore.StreamResult, error) {
		results := make([]eventstore.StreamResult, len(appends))
		var wg sync.WaitGroup
		for i, a := range appends {
			wg.Go(func() {
				results[i].AppendResult, results[i].Err = s.Append(ctx, a.Stream, a.Expected, a.Events...)
			})
		}
		wg.Wait()
		return results, nil
	}))
	b.Run("AppendMulti", benchMulti(url, func(ctx context.Context, s *pgstore.Store, appends []eventstore.StreamAppend) ([]eventstore.StreamResult, error) {
		return s.AppendMulti(ctx, appends...)
	}))
}

type multiWrite func(ctx context.Context, s *pgstore.Store, appends []eventstore.StreamAppend) ([]eventstore.StreamResult, error)

func benchMulti(url string, write multiWrite) func(b *testing.B) {
	return func(b *testing.B) {
		ctx := context.Background()
		cfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			b.Fatal(err)
		}
		cfg.MaxConns = multiConns
		cfg.MinConns = multiConns
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(pool.Close)
		if err := warm(ctx, pool); err != nil {
			b.Fatal(err)
		}
		s := pgstore.New(pool, pgstore.Config{})
		b.Cleanup(s.Close)

		prefix := eventstoretest.NewID()[:8]
		appends := make([]eventstore.StreamAppend, multiStreams)
		for i := range appends {
			appends[i] = eventstore.StreamAppend{Stream: fmt.Sprintf("review-multi-%s-%d", prefix, i), Expected: eventstore.NoStream}
		}
		for b.Loop() {
			for i := range appends {
				appends[i].Events = []eventstore.EventData{{ID: eventstoretest.NewID(), Type: "AttemptTimedOut", Data: benchData, Metadata: benchMeta}}
			}
			results, err := write(ctx, s, appends)
			if err != nil {
				b.Fatal(err)
			}
			for i, r := range results {
				if r.Err != nil {
					b.Fatalf("%s: %v", appends[i].Stream, r.Err)
				}
				appends[i].Expected = eventstore.Exact(r.NextRevision)
			}
		}
		b.ReportMetric(float64(b.N*multiStreams)/b.Elapsed().Seconds(), "events/s")
	}
}

// warm opens every connection of pool, so that no op times connecting.
func warm(ctx context.Context, pool *pgxpool.Pool) error {
	conns := make([]*pgxpool.Conn, 0, pool.Config().MaxConns)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range pool.Config().MaxConns {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return err
		}
		conns = append(conns, c)
	}
	return nil
}
