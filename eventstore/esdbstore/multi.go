package esdbstore

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"

	"github.com/reviewledger/reviewledger/eventstore"
)

// MultiConcurrency is the most streams of one AppendMulti appended at once.
const MultiConcurrency = 16

// AppendMulti implements eventstore.Store.
//
// The client (v4) has no request that appends to several streams, and the
// server no transaction spanning streams, so each stream is appended by an
// Append of its own, at most MultiConcurrency at once, and the results are
// collected. Every stream gets exactly Append's checks and result. What is
// lost is atomicity across the streams: a reader of the global order may see
// some of the call's streams before others are written, in any order, and a
// call that fails as a whole (the server unreachable, ctx done) may have
// written any subset of them. The first such failure stops the appends not
// yet started. docs/esdbstore.md ("AppendMulti") has the details.
func (s *Store) AppendMulti(ctx context.Context, appends ...eventstore.StreamAppend) ([]eventstore.StreamResult, error) {
	if err := eventstore.ValidateAppendMulti(appends); err != nil {
		return nil, err
	}
	data := make([][]esdb.EventData, len(appends))
	for i, a := range appends {
		d, err := proposed(a.Stream, a.Events)
		if err != nil {
			return nil, fmt.Errorf("append to several streams: part %d: %w", i, err)
		}
		data[i] = d
	}
	c, err := s.conn()
	if err != nil {
		return nil, fmt.Errorf("append to several streams: %w", err)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		results = make([]eventstore.StreamResult, len(appends))
		slots   = make(chan struct{}, MultiConcurrency)
		wg      sync.WaitGroup
		mu      sync.Mutex
		failed  error // the first failure of the whole call
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if failed == nil {
			failed = err
			cancel()
		}
	}
	for i, a := range appends {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if err := ctx.Err(); err != nil {
			fail(fmt.Errorf("append to %s: %w", a.Stream, err)) // unless a failure ended ctx
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			res, err := s.appendData(ctx, c, a.Stream, a.Expected, a.Events, data[i])
			if err != nil && !streamErr(err) {
				fail(err)
				return
			}
			results[i] = eventstore.StreamResult{AppendResult: res, Err: err}
		}()
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if failed != nil {
		return nil, failed
	}
	return results, nil
}

// streamErr reports whether err belongs to one stream's result rather than
// to the whole call: the stream's own state refused the append.
func streamErr(err error) bool {
	return errors.Is(err, eventstore.ErrWrongExpectedVersion) ||
		errors.Is(err, eventstore.ErrDuplicateEventID) ||
		errors.Is(err, ErrStreamDeleted)
}
