package hint_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/reviewledger/reviewledger/api/engine"
	"github.com/reviewledger/reviewledger/api/engine/hint"
	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
)

// The bus is the engine's Hints port.
var _ engine.Hints = (*hint.Bus)(nil)

func TestOpenNamesTheSettingAtFault(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]hint.Config{
		"REVIEWLEDGER_PUBSUB":        {PubSub: "kafka"},
		"Pool is required":           {PubSub: hint.PubSubPostgres},
		"REVIEWLEDGER_NATS_REPLICAS": {PubSub: hint.PubSubNATS, NATSReplicas: 6},
	} {
		_, err := hint.Open(context.Background(), cfg)
		if !errors.Is(err, hint.ErrInvalidConfig) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: Open = %v, want an ErrInvalidConfig naming it", name, err)
		}
	}
}

// The Go channel delivers a hint to this process's subscriber, is local,
// and refuses to publish once closed; stop ends the deliveries.
func TestGoChannel(t *testing.T) {
	t.Parallel()
	b, err := hint.Open(context.Background(), hint.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if !b.Local() {
		t.Error("the Go channel is not local")
	}
	var mu sync.Mutex
	var got []string
	stop, err := b.Subscribe(func(id string) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, id)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Publish("rev-1"); err != nil {
		t.Fatal(err)
	}
	clocktest.Eventually(t, "the hint delivered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 1 && got[0] == "rev-1"
	})
	if err := stop(); err != nil {
		t.Errorf("stop = %v", err)
	}
	if err := b.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
	if err := b.Close(); err != nil {
		t.Errorf("Close again = %v", err)
	}
	if err := b.Publish("rev-2"); !errors.Is(err, hint.ErrClosed) {
		t.Errorf("Publish after Close = %v, want ErrClosed", err)
	}
}
