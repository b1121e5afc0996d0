package esdbstore

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"

	"github.com/reviewledger/reviewledger/eventstore"
)

// multiConcurrency is the most streams of one AppendMulti appended at once.
const multiConcurrency = 16

// AppendMulti implements eventstore.Store.
//
// The client (v4) has no request that appends to several streams, and the
// server no transaction spanning streams, so each stream is appended by an
// Append of its own, at most multiConcurrency at once, and the results are
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
	results := make([]eventstore.StreamResult, len(appends))
	first := 0
	if !s.hasFound(c) {
		// This call may be the one to discover the server: alone.
		a := appends[0]
		res, err := s.appendData(ctx, c, a.Stream, a.Expected, a.Events, data[0])
		if err != nil && !streamErr(err) {
			return nil, err
		}
		s.found(c)
		results[0], first = eventstore.StreamResult{AppendResult: res, Err: err}, 1
	}
	if err := s.appendConcurrently(ctx, c, appends[first:], data[first:], results[first:]); err != nil {
		return nil, err
	}
	return results, nil
}

// appendConcurrently appends every one of appends (data are their events
// for the client) with at most multiConcurrency in flight, and fills in
// results. It returns the first failure of the whole call, after which it
// starts no more appends; it stops waiting for those in flight when ctx is
// done, since a client call made while the client fails to rediscover the
// server is never answered.
func (s *Store) appendConcurrently(ctx context.Context, c *esdb.Client, appends []eventstore.StreamAppend, data [][]esdb.EventData, results []eventstore.StreamResult) error {
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		slots  = make(chan struct{}, multiConcurrency)
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed error // the first failure of the whole call
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
			mu.Lock()
			defer mu.Unlock()
			results[i] = eventstore.StreamResult{AppendResult: res, Err: err}
		}()
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-parent.Done():
		fail(fmt.Errorf("append to several streams: %w", parent.Err()))
	}
	mu.Lock()
	defer mu.Unlock()
	return failed
}

// streamErr reports whether err belongs to one stream's result rather than
// to the whole call: the server answered, and the stream's own state refused
// the append.
func streamErr(err error) bool {
	return errors.Is(err, eventstore.ErrWrongExpectedVersion) ||
		errors.Is(err, eventstore.ErrDuplicateEventID) ||
		errors.Is(err, ErrStreamDeleted)
}
