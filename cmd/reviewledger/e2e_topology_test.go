package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTopologyScript runs .ci/topology --check: the whole multi-node
// topology (three NATS nodes, a PostgreSQL primary and replica, an API,
// two workers, two projector/sweeper processes) starts on this machine,
// decides reviews, holds no more server sessions than its budget (10 a
// process, 50 in all, counted in pg_stat_activity), and stops, so that
// the script anyone may try never rots.
func TestTopologyScript(t *testing.T) {
	t.Parallel()
	natsServerBin(t) // skips, or fails under CI, without nats-server
	bin := reviewledgerBin(t)
	script, err := filepath.Abs("../../.ci/topology")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", script, "--check", "--bin", bin)
	cmd.Env = e2eEnv(nil)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 10 * time.Second
	start := time.Now()
	err = cmd.Run()
	if err != nil || !strings.Contains(out.String(), "topology: check passed") {
		t.Fatalf(".ci/topology --check: %v\n%s", err, out.String())
	}
	// The check counted the processes' sessions against the budget.
	var counted string
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.Contains(line, "server sessions held by the five processes") {
			counted = line
		}
	}
	if counted == "" {
		t.Fatalf(".ci/topology --check did not count the server sessions:\n%s", out.String())
	}
	t.Logf(".ci/topology --check passed in %s; %s", time.Since(start).Round(100*time.Millisecond), counted)
}
