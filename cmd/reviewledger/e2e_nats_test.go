package main

import (
	"fmt"
	"net"
	"os"
	"testing"
	"time"
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
			"REVIEWLEDGER_WORK_TOPIC": fmt.Sprintf("rl_e2e_%d_%d", time.Now().UnixNano(), i),
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
