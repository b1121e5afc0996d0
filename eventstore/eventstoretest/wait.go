package eventstoretest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/eventstore"
)

func testWaitForEvents(t *testing.T, s eventstore.Store) {
	stream := streamName("wait")
	res := mustAppend(t, s, stream, eventstore.NoStream, event("First", `{}`))

	t.Run("returns when events are readable", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.WaitForEvents(ctx, eventstore.Start); err != nil {
			t.Fatalf("WaitForEvents(Start) with an event stored: %v", err)
		}
	})

	t.Run("wakes on append", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		e := event("Second", `{}`)
		found := make(chan error, 1)
		go func() {
			// WaitForEvents may return early: read, and wait again.
			for {
				if err := s.WaitForEvents(ctx, res.Position); err != nil {
					found <- err
					return
				}
				got, err := s.ReadAll(ctx, res.Position, 10)
				if err != nil {
					found <- err
					return
				}
				if len(got) > 0 {
					if got[0].ID != e.ID {
						t.Errorf("read %s after waiting, want %s", got[0].ID, e.ID)
					}
					found <- nil
					return
				}
			}
		}()
		time.Sleep(50 * time.Millisecond) // let the waiter block, most of the time
		mustAppend(t, s, stream, eventstore.Exact(0), e)
		if err := <-found; err != nil {
			t.Fatalf("waiting for the append: %v", err)
		}
	})

	t.Run("honours ctx", func(t *testing.T) {
		latest := readAllN(t, s, 2)
		pos := latest[len(latest)-1].Position
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		deadline := time.Now().Add(10 * time.Second)
		for {
			err := s.WaitForEvents(ctx, pos)
			if err != nil {
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("WaitForEvents after ctx expired: %v, want context.DeadlineExceeded", err)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("WaitForEvents kept returning nil after its ctx expired")
			}
		}

		canceled, cancel2 := context.WithCancel(context.Background())
		cancel2()
		if err := s.WaitForEvents(canceled, pos); !errors.Is(err, context.Canceled) {
			t.Fatalf("WaitForEvents with a canceled ctx: %v, want context.Canceled", err)
		}
	})
}
