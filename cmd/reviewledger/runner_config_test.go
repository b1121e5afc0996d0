package main

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/api/runner"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/pgstore"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

func validRunnerConfig() RunnerConfig {
	return RunnerConfig{Workers: 4, PubSub: "gochannel", NATSURL: "nats://127.0.0.1:4222", RetryBudget: 0.2,
		RetryBudgetMin: 50, PayloadRetention: time.Hour, SimSeed: 1, SimMedian: 5 * time.Millisecond, SimP99: 20 * time.Millisecond,
		SimRejectRate: 0.1}
}

func TestRunnerConfigValidateNamesTheSetting(t *testing.T) {
	t.Parallel()
	if err := validRunnerConfig().Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	cases := map[string]func(*RunnerConfig){
		"REVIEWLEDGER_WORKERS":                func(c *RunnerConfig) { c.Workers = 0 },
		"REVIEWLEDGER_PUBSUB":                 func(c *RunnerConfig) { c.PubSub = "kafka" },
		"REVIEWLEDGER_NATS_URL":               func(c *RunnerConfig) { c.PubSub, c.NATSURL = "nats", "" },
		"REVIEWLEDGER_RETRY_BUDGET":           func(c *RunnerConfig) { c.RetryBudget = 1.5 },
		"REVIEWLEDGER_RETRY_BUDGET_MIN":       func(c *RunnerConfig) { c.RetryBudgetMin = 0 },
		"REVIEWLEDGER_PAYLOAD_RETENTION":      func(c *RunnerConfig) { c.PayloadRetention = 0 },
		"REVIEWLEDGER_SIM_TIMEOUT_RATE":       func(c *RunnerConfig) { c.SimTimeoutRate = -1 },
		"REVIEWLEDGER_SIM_ASYNC_RATE":         func(c *RunnerConfig) { c.SimAsyncRate = 3 },
		"REVIEWLEDGER_SIM_LATE_CALLBACK_RATE": func(c *RunnerConfig) { c.SimLateCallback = 2 },
		"REVIEWLEDGER_SIM_P99_LATENCY":        func(c *RunnerConfig) { c.SimP99 = time.Millisecond },
	}
	for setting, mutate := range cases {
		c := validRunnerConfig()
		mutate(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), setting) {
			t.Errorf("%s: Validate = %v, want an error naming it", setting, err)
		}
	}
}

// serve's runner, on the simulator with asynchronous answers, decides a
// review end to end.
func TestNewRunnerWithSimulator(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	store := pgstore.New(pool, pgstore.Config{})
	defer store.Close()
	rc := validRunnerConfig()
	rc.SimAsyncRate = 0.5
	cfg := &Config{Provider: "sim", Policy: domain.DefaultPolicy(), SweepInterval: time.Second}
	svc, stop, err := rc.NewRunner(cfg, pool, ledger.New(store), nil, slog.New(slog.DiscardHandler))
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
		if _, _, err := svc.Submit(ctx, runner.SubmitRequest{ReviewID: id, ContentClass: "caption_suggestion", Content: []byte(id)}); err != nil {
			t.Fatal(err)
		}
	}
	led := ledger.New(store)
	for _, id := range ids {
		deadline := time.Now().Add(20 * time.Second)
		for {
			rv, err := led.Load(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if rv.State() != domain.StatePending {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s still pending", id)
			}
			time.Sleep(20 * time.Millisecond)
		}
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
