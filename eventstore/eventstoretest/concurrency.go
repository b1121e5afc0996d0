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

// testGapFree has many writers append to many streams while a reader tails
// the global order from the start. The reader must see every committed event
// exactly once, in strictly increasing positions, and each stream in revision
// order: an event that became visible behind the reader would be missed.
func testGapFree(t *testing.T, s eventstore.Store) {
	const writers, streamsPerWriter, appendsPerStream = 16, 2, 8
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
			for range appendsPerStream * streamsPerWriter {
				i := rng.IntN(streamsPerWriter)
				expected := eventstore.NoStream
				if next[i] > 0 {
					expected = eventstore.Exact(next[i] - 1)
				}
				evs := events(1+rng.IntN(3), "Gap")
				if _, err := s.Append(ctx, streams[i], expected, evs...); err != nil {
					t.Errorf("append to %s: %v", streams[i], err)
					return
				}
				next[i] += uint64(len(evs))
				mu.Lock()
				for _, e := range evs {
					committed[e.ID] = e
				}
				perStream[streams[i]] = next[i]
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
