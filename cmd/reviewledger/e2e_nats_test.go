package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsAvailable skips the test when no NATS server listens on
// 127.0.0.1:4222, unless CI is set: then it fails.
func natsAvailable(t *testing.T) {
	t.Helper()
	c, err := net.DialTimeout("tcp", "127.0.0.1:4222", time.Second)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("NATS at 127.0.0.1:4222 is unreachable (CI is set, so this fails): %v", err)
		}
		t.Skipf("NATS at 127.0.0.1:4222 is unreachable, skipping: %v", err)
	}
	c.Close()
}

// natsTopic returns a REVIEWLEDGER_WORK_TOPIC of the test's own; its
// JetStream stream is deleted when the test ends, after the servers
// started later have stopped.
func natsTopic(t *testing.T, suffix string) string {
	t.Helper()
	topic := fmt.Sprintf("rl_e2e_%d_%s", time.Now().UnixNano(), suffix)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
		defer cancel()
		nc, err := nats.Connect("nats://127.0.0.1:4222")
		if err != nil {
			return
		}
		defer nc.Close()
		if js, err := jetstream.New(nc); err == nil {
			if err := js.DeleteStream(ctx, topic); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
				t.Logf("delete JetStream stream %s: %v", topic, err)
			}
		}
	})
	return topic
}

// TestE2ENATSDeployments: two deployments (each its own database and
// REVIEWLEDGER_WORK_TOPIC) share one NATS server. Each works its own
// reviews: none is taken by the other deployment, found missing there and
// left to be escalated at its deadline without a provider call.
func TestE2ENATSDeployments(t *testing.T) {
	t.Parallel()
	natsAvailable(t)
	var srvs [2]*e2eServer
	for i := range srvs {
		srvs[i] = newE2EServer(t, map[string]string{
			"REVIEWLEDGER_PUBSUB":     "nats",
			"REVIEWLEDGER_WORK_TOPIC": natsTopic(t, fmt.Sprint(i)),
		})
	}
	// Only the first deployment has work; the second idles on its own topic.
	var ids []string
	for i := range 10 {
		id := reviewIDf("e2e-nats-%02d", i)
		ids = append(ids, id)
		srvs[0].submit(t, id, "e2e_fast", content("nats"))
	}
	for _, id := range ids {
		if got := srvs[0].waitSettled(t, id); got.State != "accepted" || got.Attempts != 1 {
			t.Errorf("%s: %+v, want accepted after one attempt: %v", id, got, eventTypes(srvs[0].events(t, id)))
		}
	}
}
