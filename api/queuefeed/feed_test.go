package queuefeed

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/memstore"
)

func TestIDRoundTrip(t *testing.T) {
	for _, p := range []eventstore.Position{{}, {Commit: 1, Prepare: 1}, {Commit: 18446744073709551615, Prepare: 7}} {
		got, err := ParseID(FormatID(p))
		if err != nil || got != p {
			t.Errorf("%v: parsed back as %v, %v", p, got, err)
		}
	}
	for _, id := range []string{"", "12", "1/2", "a-1", "1-", "-1", "1-2-3", "-1-2"} {
		if _, err := ParseID(id); !errors.Is(err, ErrBadID) {
			t.Errorf("ParseID(%q) = %v, want ErrBadID", id, err)
		}
	}
}

// noHead is an event store that cannot tell the head of its global order
// (as the KurrentDB backend cannot).
type noHead struct{ eventstore.Store }

// A feed over a store that cannot tell its head says so at once, to
// every stream, instead of leaving them waiting.
func TestFeedWithoutHeadRefusesStreams(t *testing.T) {
	f := New(noHead{memstore.New()}, nil, Config{})
	ctx := context.Background()
	if err := f.Follow(ctx); !errors.Is(err, ErrNoHead) {
		t.Fatalf("Follow = %v, want ErrNoHead", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := f.Head(ctx); !errors.Is(err, ErrNoHead) {
		t.Fatalf("Head = %v, want ErrNoHead", err)
	}
	if _, _, _, err := f.Next(ctx, eventstore.Position{Commit: 1}, 10); !errors.Is(err, ErrNoHead) {
		t.Fatalf("Next = %v, want ErrNoHead", err)
	}
}
