package main

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/api/engine"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
	"github.com/reviewledger/reviewledger/eventstore/pgstore"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

func validEngineConfig() EngineConfig {
	return EngineConfig{Workers: 4, Lease: 5 * time.Second, PollInterval: time.Second, CommitBatch: 256, CommitFlushes: 1, PubSub: "gochannel", NATSURL: "nats://127.0.0.1:4222", NATSReplicas: 1, RetryBudget: 0.2,
		RetryBudgetMin: 50, PayloadRetention: time.Hour, SimSeed: 1, SimMedian: 5 * time.Millisecond, SimP99: 20 * time.Millisecond,
		SimRejectRate: 0.1}
}

func TestEngineConfigValidateNamesTheSetting(t *testing.T) {
	t.Parallel()
	if err := validEngineConfig().Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	cases := map[string]func(*EngineConfig){
		"REVIEWLEDGER_WORKERS":                func(c *EngineConfig) { c.Workers = 0 },
		"REVIEWLEDGER_LEASE":                  func(c *EngineConfig) { c.Lease = time.Millisecond },
		"REVIEWLEDGER_POLL_INTERVAL":          func(c *EngineConfig) { c.PollInterval = 0 },
		"REVIEWLEDGER_COMMIT_BATCH":           func(c *EngineConfig) { c.CommitBatch = 0 },
		"REVIEWLEDGER_COMMIT_WINDOW":          func(c *EngineConfig) { c.CommitWindow = time.Minute },
		"REVIEWLEDGER_COMMIT_FLUSHES":         func(c *EngineConfig) { c.CommitFlushes = 0 },
		"REVIEWLEDGER_PUBSUB":                 func(c *EngineConfig) { c.PubSub = "kafka" },
		"REVIEWLEDGER_NATS_URL":               func(c *EngineConfig) { c.PubSub, c.NATSURL = "nats", "" },
		"REVIEWLEDGER_NATS_REPLICAS":          func(c *EngineConfig) { c.NATSReplicas = 6 },
		"REVIEWLEDGER_RETRY_BUDGET":           func(c *EngineConfig) { c.RetryBudget = 1.5 },
		"REVIEWLEDGER_RETRY_BUDGET_MIN":       func(c *EngineConfig) { c.RetryBudgetMin = 0 },
		"REVIEWLEDGER_PAYLOAD_RETENTION":      func(c *EngineConfig) { c.PayloadRetention = 0 },
		"REVIEWLEDGER_SIM_TIMEOUT_RATE":       func(c *EngineConfig) { c.SimTimeoutRate = -1 },
		"REVIEWLEDGER_SIM_ASYNC_RATE":         func(c *EngineConfig) { c.SimAsyncRate = 3 },
		"REVIEWLEDGER_SIM_LATE_CALLBACK_RATE": func(c *EngineConfig) { c.SimLateCallback = 2 },
		"REVIEWLEDGER_SIM_P99_LATENCY":        func(c *EngineConfig) { c.SimP99 = time.Millisecond },
	}
	for setting, mutate := range cases {
		c := validEngineConfig()
		mutate(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), setting) {
			t.Errorf("%s: Validate = %v, want an error naming it", setting, err)
		}
	}
	// Several servers, comma-separated: a cluster's members.
	for list, ok := range map[string]bool{
		"nats://127.0.0.1:4222,nats://127.0.0.1:4223, nats://127.0.0.1:4224": true,
		"nats://127.0.0.1:4222,":         false,
		"nats://127.0.0.1:4222,http://x": false,
		"127.0.0.1:4222,127.0.0.1:4223":  true,
		"nats://":                        false,
	} {
		c := validEngineConfig()
		c.PubSub, c.NATSURL = "nats", list
		if err := c.Validate(); (err == nil) != ok || (err != nil && !strings.Contains(err.Error(), "REVIEWLEDGER_NATS_URL")) {
			t.Errorf("REVIEWLEDGER_NATS_URL=%q: Validate = %v, want valid %v", list, err, ok)
		}
	}
}

// serve's engine, on the simulator with asynchronous answers, decides a
// review end to end.
func TestNewEngineWithSimulator(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	store := pgstore.New(pool, pgstore.Config{})
	defer store.Close()
	rc := validEngineConfig()
	rc.SimAsyncRate = 0.5
	cfg := &Config{Provider: "sim", Policy: domain.DefaultPolicy(), SweepInterval: time.Second}
	svc, led, stop, err := rc.NewEngine(context.Background(), cfg, pools{Main: pool, Sessions: pool}, store, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
		_ = stop()
	}()
	ids := []string{"sim-1", "sim-2", "sim-3", "sim-4"}
	for _, id := range ids {
		if _, _, err := svc.Submit(ctx, engine.SubmitRequest{ReviewID: id, ContentClass: "caption_suggestion", Content: []byte(id)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		clocktest.Eventually(t, id+" to leave pending", func() bool {
			rv, err := led.Load(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			return rv.State() != domain.StatePending
		})
	}
}

func TestDefaultTopic(t *testing.T) {
	t.Parallel()
	for db, want := range map[string]string{
		"reviewledger":                         "reviewledger_work_reviewledger",
		"rl-eu.west":                           "reviewledger_work_rl_eu_west",
		"":                                     "reviewledger_work_default",
		"a_database_name_far_longer_than_fits": "reviewledger_work_a_database_name_far_lo",
	} {
		got := defaultTopic(db)
		if got != want || !validTopic(got) {
			t.Errorf("defaultTopic(%q) = %q (valid %v), want %q", db, got, validTopic(got), want)
		}
	}
}
