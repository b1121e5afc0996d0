package eventstoretest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/eventstore"
)

// testConcurrentSameRevision races writers to append at the same expected
// revision, round after round: exactly one wins each round, the others get
// ErrWrongExpectedVersion, and the stream holds exactly the winners' events.
func testConcurrentSameRevision(t *testing.T, s eventstore.Store) {
	const writers, rounds = 8, 10
	stream := streamName("race")
	want := []eventstore.EventData{event("Started", `{}`)}
	mustAppend(t, s, stream, eventstore.NoStream, want...)

	for round := range uint64(rounds) {
		var (
			wg     sync.WaitGroup
			start  = make(chan struct{})
			mu     sync.Mutex
			winner []eventstore.EventData
		)
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				e := event("Raced", fmt.Sprintf(`{"round": %d, "writer": %d}`, round, w))
				<-start
				res, err := s.Append(ctxFor(t), stream, eventstore.Exact(round), e)
				switch {
				case err == nil:
					mu.Lock()
					winner = append(winner, e)
					mu.Unlock()
					if res.NextRevision != round+1 {
						t.Errorf("round %d: winner got NextRevision %d", round, res.NextRevision)
					}
				case !errors.Is(err, eventstore.ErrWrongExpectedVersion):
					t.Errorf("round %d: loser got %v, want ErrWrongExpectedVersion", round, err)
				}
			}()
		}
		close(start)
		wg.Wait()
		if len(winner) != 1 {
			t.Fatalf("round %d: %d appends at Exact(%d) succeeded, want exactly 1", round, len(winner), round)
		}
		want = append(want, winner[0])
	}
	checkSame(t, stream, 0, mustRead(t, s, stream, 0), want)
}

// testConcurrentAny has writers append to one stream with Any at once: every
// append succeeds, and the stream is contiguous with each event exactly once.
func testConcurrentAny(t *testing.T, s eventstore.Store) {
	const writers, each = 4, 10
	stream := streamName("any")
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		ids = make(map[string]bool)
	)
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				e := event("Any", `{}`)
				if _, err := s.Append(ctxFor(t), stream, eventstore.Any, e); err != nil {
					t.Errorf("append at Any: %v", err)
					return
				}
				mu.Lock()
				ids[e.ID] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	got := mustRead(t, s, stream, 0)
	if len(got) != writers*each {
		t.Fatalf("stream holds %d events, want %d", len(got), writers*each)
	}
	for i, r := range got {
		if r.Revision != uint64(i) || !ids[r.ID] {
			t.Fatalf("event %d: revision %d, id %s known %v", i, r.Revision, r.ID, ids[r.ID])
		}
		delete(ids, r.ID)
	}
}

// testConcurrentRetry has writers append the same events at once, as an
// append and its retries racing, with each condition that does not name a
// revision (Any, StreamExists), round after round, one event or two, by
// Append or by AppendMulti beside a stream of its own: every call
// succeeds with the same result, and the stream holds the events once.
// Only the event IDs within the stream tell a retry from a new append here.
func testConcurrentRetry(t *testing.T, s eventstore.Store) {
	const writers, rounds = 6, 8
	for _, expected := range []eventstore.ExpectedRevision{eventstore.Any, eventstore.StreamExists} {
		stream := streamName("retry")
		want := []eventstore.EventData{event("Started", `{}`)}
		mustAppend(t, s, stream, eventstore.NoStream, want...)
		for round := range rounds {
			evs := events(1+round%2, "Retried")
			results := make([]eventstore.AppendResult, writers)
			var (
				wg    sync.WaitGroup
				start = make(chan struct{})
			)
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					res, err := appendRetried(ctxFor(t), s, stream, expected, evs, round%4 >= 2)
					if err != nil {
						t.Errorf("%s round %d: append at %v: %v", stream, round, expected, err)
					}
					results[w] = res
				}()
			}
			close(start)
			wg.Wait()
			for w, res := range results[1:] {
				if res != results[0] {
					t.Fatalf("%s round %d: writer %d got %+v, writer 0 %+v: want one result", stream, round, w+1, res, results[0])
				}
			}
			want = append(want, evs...)
		}
		checkSame(t, stream, 0, mustRead(t, s, stream, 0), want)
	}
}

// appendRetried appends evs to stream by Append, or by AppendMulti beside
// a new stream of its own, and returns the stream's result.
func appendRetried(ctx context.Context, s eventstore.Store, stream string, expected eventstore.ExpectedRevision, evs []eventstore.EventData, multi bool) (eventstore.AppendResult, error) {
	if !multi {
		return s.Append(ctx, stream, expected, evs...)
	}
	results, err := s.AppendMulti(ctx,
		eventstore.StreamAppend{Stream: streamName("beside"), Expected: eventstore.NoStream, Events: events(1, "Beside")},
		eventstore.StreamAppend{Stream: stream, Expected: expected, Events: evs})
	switch {
	case err != nil:
		return eventstore.AppendResult{}, err
	case results[0].Err != nil:
		return eventstore.AppendResult{}, fmt.Errorf("beside: %w", results[0].Err)
	}
	return results[1].AppendResult, results[1].Err
}

// testGapFree has many writers append to many streams while a reader tails
// the global order from the start. The reader must see every committed event
// exactly once, in strictly increasing positions, and each stream in revision
// order: an event that became visible behind the reader would be missed.
func testGapFree(t *testing.T, s eventstore.Store) { gapFree(t, s, 2, 16, appendOne) }

// testMultiGapFree is testGapFree with writers that append to several of
// their streams in each call, about as many events in all.
func testMultiGapFree(t *testing.T, s eventstore.Store) { gapFree(t, s, 3, 8, appendSeveral) }

// gapWrite appends to some of streams, which hold next events each, and
// returns the events it wrote by the stream's index.
type gapWrite func(ctx context.Context, s eventstore.Store, rng *rand.Rand, streams []string, next []uint64) (map[int][]eventstore.EventData, error)

// appendOne appends one to three events to one of the streams.
func appendOne(ctx context.Context, s eventstore.Store, rng *rand.Rand, streams []string, next []uint64) (map[int][]eventstore.EventData, error) {
	i := rng.IntN(len(streams))
	evs := events(1+rng.IntN(3), "Gap")
	if _, err := s.Append(ctx, streams[i], expectedAt(next[i]), evs...); err != nil {
		return nil, fmt.Errorf("append to %s: %w", streams[i], err)
	}
	return map[int][]eventstore.EventData{i: evs}, nil
}

// appendSeveral appends one to three events to each of a random, non-empty
// subset of the streams in one AppendMulti.
func appendSeveral(ctx context.Context, s eventstore.Store, rng *rand.Rand, streams []string, next []uint64) (map[int][]eventstore.EventData, error) {
	picked := rng.Perm(len(streams))[:1+rng.IntN(len(streams))]
	appends := make([]eventstore.StreamAppend, len(picked))
	for k, i := range picked {
		appends[k] = eventstore.StreamAppend{Stream: streams[i], Expected: expectedAt(next[i]), Events: events(1+rng.IntN(3), "Gap")}
	}
	results, err := s.AppendMulti(ctx, appends...)
	if err != nil {
		return nil, fmt.Errorf("append to %d streams: %w", len(appends), err)
	}
	written := make(map[int][]eventstore.EventData, len(picked))
	for k, i := range picked {
		if err := results[k].Err; err != nil {
			return nil, fmt.Errorf("append to %s in a call of %d streams: %w", streams[i], len(appends), err)
		}
		written[i] = appends[k].Events
	}
	return written, nil
}

// gapFree runs the gap test with 16 writers of streamsPerWriter streams
// each, every writer calling write writesPerWriter times.
func gapFree(t *testing.T, s eventstore.Store, streamsPerWriter, writesPerWriter int, write gapWrite) {
	const writers = 16
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		committed = make(map[string]eventstore.EventData)
		perStream = make(map[string]uint64)
	)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			var streams []string
			for i := range streamsPerWriter {
				streams = append(streams, streamName(fmt.Sprintf("gap-%d-%d", w, i)))
			}
			next := make([]uint64, streamsPerWriter)
			for range writesPerWriter {
				written, err := write(ctx, s, rng, streams, next)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for i, evs := range written {
					next[i] += uint64(len(evs))
					for _, e := range evs {
						committed[e.ID] = e
					}
					perStream[streams[i]] = next[i]
				}
				mu.Unlock()
			}
		}()
	}
	writersDone := make(chan struct{})
	go func() { wg.Wait(); close(writersDone) }()
	// Waits end when the writers are done too: the last append may have
	// been read before they return.
	tailCtx, stopTail := context.WithCancel(ctx)
	defer stopTail()
	go func() {
		select {
		case <-writersDone:
			stopTail()
		case <-tailCtx.Done():
		}
	}()

	seen := make(map[string]bool)
	nextRev := make(map[string]uint64)
	pos := eventstore.Start
	finished := false
	for {
		got, err := s.ReadAll(ctx, pos, 7)
		if err != nil {
			t.Fatalf("ReadAll after %s: %v", pos, err)
		}
		for _, r := range got {
			if !pos.Less(r.Position) {
				t.Fatalf("ReadAll after %s returned position %s", pos, r.Position)
			}
			pos = r.Position
			if seen[r.ID] {
				t.Fatalf("event %s (%s@%d) read twice", r.ID, r.Stream, r.Revision)
			}
			seen[r.ID] = true
			if r.Revision != nextRev[r.Stream] {
				t.Fatalf("stream %s: read revision %d, want %d next", r.Stream, r.Revision, nextRev[r.Stream])
			}
			nextRev[r.Stream]++
		}
		if len(got) > 0 {
			continue
		}
		if finished {
			break
		}
		select {
		case <-writersDone:
			// Everything is committed; one more empty read ends the loop
			// once the reader has caught up.
			mu.Lock()
			n := len(committed)
			mu.Unlock()
			if len(seen) >= n {
				finished = true
			}
		default:
		}
		if !finished {
			waitCtx := tailCtx
			if tailCtx.Err() != nil {
				waitCtx = ctx
			}
			if err := s.WaitForEvents(waitCtx, pos); err != nil && (waitCtx == ctx || ctx.Err() != nil) {
				t.Fatalf("WaitForEvents after %s: %v (read %d of %d events)", pos, err, len(seen), len(committed))
			}
		}
	}
	if t.Failed() {
		return
	}
	if len(seen) != len(committed) {
		t.Fatalf("reader saw %d events, writers committed %d", len(seen), len(committed))
	}
	for id := range committed {
		if !seen[id] {
			t.Fatalf("committed event %s never read", id)
		}
	}
	for stream, n := range perStream {
		if nextRev[stream] != n {
			t.Fatalf("stream %s: read %d events, %d committed", stream, nextRev[stream], n)
		}
	}
}

// testMultiConcurrent races writers whose calls each touch a random subset
// of a few shared streams, at the revisions they read. A stream refused for
// its revision is read again and retried, with the same events, until all
// of the call's events are written. In the end every stream has contiguous
// revisions holding every event exactly once, and every result, success or
// refusal, agrees with what was stored.
func testMultiConcurrent(t *testing.T, s eventstore.Store) {
	const writers, callsPerWriter, shared, maxAttempts = 6, 6, 4, 200
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	streams := make([]string, shared)
	for i := range streams {
		streams[i] = streamName(fmt.Sprintf("shared-%d", i))
	}
	type success struct {
		append eventstore.StreamAppend
		result eventstore.AppendResult
	}
	type refusal struct {
		append eventstore.StreamAppend
		err    error
	}
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		successes []success
		refusals  []refusal
		appended  = make(map[string]string) // event ID: stream
	)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 2))
			for range callsPerWriter {
				pending := make(map[string][]eventstore.EventData)
				for _, i := range rng.Perm(shared)[:1+rng.IntN(shared)] {
					pending[streams[i]] = events(1+rng.IntN(2), "Shared")
					mu.Lock()
					for _, e := range pending[streams[i]] {
						appended[e.ID] = streams[i]
					}
					mu.Unlock()
				}
				for attempt := 0; len(pending) > 0; attempt++ {
					if attempt == maxAttempts {
						t.Errorf("writer %d: %d streams still refused after %d attempts", w, len(pending), attempt)
						return
					}
					var appends []eventstore.StreamAppend
					for stream, evs := range pending {
						next, err := streamLength(ctx, s, stream)
						if err != nil {
							t.Error(err)
							return
						}
						appends = append(appends, eventstore.StreamAppend{Stream: stream, Expected: expectedAt(next), Events: evs})
					}
					results, err := s.AppendMulti(ctx, appends...)
					if err != nil {
						t.Errorf("writer %d: append to %d streams: %v", w, len(appends), err)
						return
					}
					mu.Lock()
					for k, a := range appends {
						switch err := results[k].Err; {
						case err == nil:
							successes = append(successes, success{a, results[k].AppendResult})
							delete(pending, a.Stream)
						case errors.Is(err, eventstore.ErrWrongExpectedVersion):
							refusals = append(refusals, refusal{a, err})
						default:
							t.Errorf("writer %d: %s at %s: %v", w, a.Stream, a.Expected, err)
						}
					}
					mu.Unlock()
					if t.Failed() {
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	stored := make(map[string][]eventstore.RecordedEvent, shared)
	seen := make(map[string]bool)
	for _, stream := range streams {
		got, err := s.ReadStream(ctxFor(t), stream, 0)
		if err != nil && !errors.Is(err, eventstore.ErrStreamNotFound) {
			t.Fatal(err)
		}
		for i, r := range got {
			if r.Revision != uint64(i) {
				t.Fatalf("%s: event %d has revision %d", stream, i, r.Revision)
			}
			if appended[r.ID] != stream || seen[r.ID] {
				t.Fatalf("%s@%d: event %s appended to %q, seen before %v", stream, i, r.ID, appended[r.ID], seen[r.ID])
			}
			seen[r.ID] = true
		}
		stored[stream] = got
	}
	if len(seen) != len(appended) {
		t.Fatalf("streams hold %d events, %d were appended", len(seen), len(appended))
	}
	for _, w := range successes {
		got := stored[w.append.Stream]
		n := uint64(len(w.append.Events))
		if w.result.NextRevision >= uint64(len(got)) || w.result.NextRevision+1 < n {
			t.Fatalf("%s: result %+v outside the stream's %d events", w.append.Stream, w.result, len(got))
		}
		first := w.result.NextRevision + 1 - n
		checkSame(t, w.append.Stream, first, got[first:first+n], w.append.Events)
		if got[w.result.NextRevision].Position != w.result.Position {
			t.Fatalf("%s: result at %s, its last event at %s", w.append.Stream, w.result.Position, got[w.result.NextRevision].Position)
		}
		if want := expectedAt(first); w.append.Expected != want {
			t.Fatalf("%s: append at %s written at revision %d", w.append.Stream, w.append.Expected, first)
		}
	}
	for _, r := range refusals {
		var wev *eventstore.WrongExpectedVersionError
		if !errors.As(r.err, &wev) || wev.Stream != r.append.Stream || wev.Expected != r.append.Expected {
			t.Fatalf("%s at %s refused with %v", r.append.Stream, r.append.Expected, r.err)
		}
		if len(stored[r.append.Stream]) == 0 || wev.Exists && wev.Actual >= uint64(len(stored[r.append.Stream])) {
			t.Fatalf("%s at %s refused for %+v, the stream has %d events", r.append.Stream, r.append.Expected, *wev, len(stored[r.append.Stream]))
		}
		if r.append.Expected.Satisfied(wev.Exists, wev.Actual) {
			t.Fatalf("%s at %s refused although the stream was %+v", r.append.Stream, r.append.Expected, *wev)
		}
	}
	if all := readAllN(t, s, len(appended)); len(all) != len(appended) {
		t.Fatalf("ReadAll: %d events, want %d", len(all), len(appended))
	}
}

// streamLength returns how many events stream holds.
func streamLength(ctx context.Context, s eventstore.Store, stream string) (uint64, error) {
	got, err := s.ReadStream(ctx, stream, 0)
	if errors.Is(err, eventstore.ErrStreamNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", stream, err)
	}
	return uint64(len(got)), nil
}
