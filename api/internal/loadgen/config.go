package main

import (
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/api/engine/provider"
	"github.com/reviewledger/reviewledger/domain"
)

// loadClass is the content class every submission uses: one class without a
// human gate, so each review ends with either a finding or an escalation.
const loadClass = "caption_suggestion"

// Config is one load run.
type Config struct {
	// AdminURL is the server on which the run creates its database and
	// drops it at the end. Ignored when DatabaseURL is set.
	AdminURL string
	// DatabaseURL, when set, is an existing database to use instead; it is
	// migrated if needed and not dropped.
	DatabaseURL string

	Reviews     int // submissions, and requests of each baseline
	Concurrency int // concurrent clients in every request phase
	// PhaseTimeout bounds each request phase; DrainTimeout the wait for the
	// reviews to leave pending and the read models to catch up.
	PhaseTimeout time.Duration
	DrainTimeout time.Duration

	// MaxInFlight is the API's admission ceiling (0: none, as serve's
	// default); submissions over it are answered 429 and made again.
	MaxInFlight int
	Workers     int   // review workers
	PoolConns   int32 // pool size; 0: max(16, Workers+8), as serve

	// The policy of the class submitted.
	Budget         time.Duration
	AttemptTimeout time.Duration
	MaxAttempts    int

	// Sim shapes the simulated provider; Deliver and Signer are set by Run.
	Sim provider.SimConfig

	Verbose bool
}

// Validate names the flag at fault.
func (c Config) Validate() error {
	switch {
	case c.DatabaseURL == "" && c.AdminURL == "":
		return fmt.Errorf("-admin-url: required when -database is not set")
	case c.Reviews < 1:
		return fmt.Errorf("-reviews: must be at least 1, got %d", c.Reviews)
	case c.Concurrency < 1:
		return fmt.Errorf("-concurrency: must be at least 1, got %d", c.Concurrency)
	case c.Concurrency > 4096:
		return fmt.Errorf("-concurrency: at most 4096, got %d", c.Concurrency)
	case c.PhaseTimeout <= 0:
		return fmt.Errorf("-phase-timeout: must be a positive duration, got %s", c.PhaseTimeout)
	case c.DrainTimeout <= 0:
		return fmt.Errorf("-drain-timeout: must be a positive duration, got %s", c.DrainTimeout)
	case c.MaxInFlight < 0:
		return fmt.Errorf("-max-in-flight: must not be negative, got %d", c.MaxInFlight)
	case c.Workers < 1:
		return fmt.Errorf("-workers: must be at least 1, got %d", c.Workers)
	case c.PoolConns < 0:
		return fmt.Errorf("-pool-max-conns: must not be negative, got %d", c.PoolConns)
	case c.Sim.MedianLatency <= 0:
		return fmt.Errorf("-sim-median-latency: must be a positive duration, got %s", c.Sim.MedianLatency)
	case c.Sim.P99Latency < c.Sim.MedianLatency:
		return fmt.Errorf("-sim-p99-latency: must not be below -sim-median-latency %s, got %s", c.Sim.MedianLatency, c.Sim.P99Latency)
	}
	for _, u := range []struct{ flag, url string }{{"-admin-url", c.AdminURL}, {"-database", c.DatabaseURL}} {
		if u.url == "" {
			continue
		}
		if _, err := pgxpool.ParseConfig(u.url); err != nil {
			return fmt.Errorf("%s: %w", u.flag, err)
		}
	}
	rates := []struct {
		flag string
		v    float64
	}{
		{"-sim-timeout-rate", c.Sim.TimeoutRate}, {"-sim-error-rate", c.Sim.ErrorRate},
		{"-sim-invalid-rate", c.Sim.InvalidRate}, {"-sim-async-rate", c.Sim.AsyncRate},
		{"-sim-late-callback-rate", c.Sim.LateCallbackRate}, {"-sim-reject-rate", c.Sim.RejectRate},
	}
	for _, r := range rates {
		if r.v < 0 || r.v > 1 || math.IsNaN(r.v) {
			return fmt.Errorf("%s: must be between 0 and 1, got %v", r.flag, r.v)
		}
	}
	if sum := c.Sim.TimeoutRate + c.Sim.ErrorRate + c.Sim.InvalidRate + c.Sim.AsyncRate; sum > 1 {
		return fmt.Errorf("-sim-timeout-rate + -sim-error-rate + -sim-invalid-rate + -sim-async-rate: must not exceed 1, got %v", sum)
	}
	if err := c.policy().Validate(); err != nil {
		return fmt.Errorf("-budget, -attempt-timeout, -max-attempts: %w", err)
	}
	return nil
}

// policy is the built-in default policy with the submitted class's budget,
// attempt timeout and attempts taken from the flags.
func (c Config) policy() domain.Policy {
	p := domain.DefaultPolicy()
	cp := p.Classes[loadClass]
	cp.Budget, cp.AttemptTimeout, cp.MaxAttempts = c.Budget, c.AttemptTimeout, c.MaxAttempts
	p.Classes[loadClass] = cp
	return p
}
