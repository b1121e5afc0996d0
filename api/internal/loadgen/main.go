// Command loadgen measures the whole service under load, in one process:
// it wires the real service (PostgreSQL event store, ledger, review runner
// with the simulated provider, projector and the HTTP API on a loopback
// port), submits reviews over HTTP at a fixed concurrency, waits until every
// review left pending and the read models caught up, and prints the
// figures recorded in docs/benchmarks.md, beside two baselines measured in
// the same run: GET /healthz on the same server, and a plain single-row
// INSERT through the same pool.
//
//	go run ./api/internal/loadgen -reviews 5000 -concurrency 32
//
// By default it creates a database of its own on the server of
// DATABASE_URL and drops it at the end; -database names an existing one
// instead (migrated if needed, left in place).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// defaultAdminURL is the server used when neither -admin-url nor
// DATABASE_URL is given.
const defaultAdminURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

func main() { os.Exit(exitCode()) }

// exitCode runs the load and returns the process's exit status: 2 for bad
// flags, 1 when the run failed.
func exitCode() int {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := Run(ctx, cfg)
	if res != nil {
		res.Print(os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		return 1
	}
	return 0
}

func parseFlags(args []string, errOut io.Writer) (Config, error) {
	admin := os.Getenv("DATABASE_URL")
	if admin == "" {
		admin = defaultAdminURL
	}
	var c Config
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(errOut)
	fs.StringVar(&c.AdminURL, "admin-url", admin, "PostgreSQL server on which a database of the run's own is created and dropped (DATABASE_URL)")
	fs.StringVar(&c.DatabaseURL, "database", "", "use this existing database instead of creating one (migrated if needed, not dropped)")
	fs.IntVar(&c.Reviews, "reviews", 5000, "reviews submitted")
	fs.IntVar(&c.Concurrency, "concurrency", 32, "concurrent HTTP clients, for the submissions and both baselines")
	fs.DurationVar(&c.PhaseTimeout, "phase-timeout", 2*time.Minute, "longest each request phase (baselines, submissions) may run; requests stop there")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", 3*time.Minute, "longest wait, after the last submission, for every review to leave pending and the read models to catch up")
	fs.IntVar(&c.MaxInFlight, "max-in-flight", 0, "admission ceiling of the API (REVIEWLEDGER_MAX_IN_FLIGHT; 0: none); a submission answered 429 is made again after its Retry-After")
	fs.IntVar(&c.Workers, "workers", 16, "review workers (REVIEWLEDGER_WORKERS)")
	poolConns := fs.Int("pool-max-conns", 0, "PostgreSQL pool size (0: max(16, workers+8), as reviewledger serve sizes it)")
	fs.DurationVar(&c.Budget, "budget", 10*time.Second, "end-to-end budget of the class submitted")
	fs.DurationVar(&c.AttemptTimeout, "attempt-timeout", time.Second, "attempt timeout cap of the class submitted")
	fs.IntVar(&c.MaxAttempts, "max-attempts", 3, "attempts per review of the class submitted")
	fs.Uint64Var(&c.Sim.Seed, "sim-seed", 1, "simulator: random seed")
	fs.DurationVar(&c.Sim.MedianLatency, "sim-median-latency", 20*time.Millisecond, "simulator: median service time")
	fs.DurationVar(&c.Sim.P99Latency, "sim-p99-latency", 200*time.Millisecond, "simulator: 99th percentile service time")
	fs.Float64Var(&c.Sim.TimeoutRate, "sim-timeout-rate", 0.01, "simulator: share of attempts that hang until their timeout")
	fs.Float64Var(&c.Sim.ErrorRate, "sim-error-rate", 0.02, "simulator: share of attempts answered 503")
	fs.Float64Var(&c.Sim.InvalidRate, "sim-invalid-rate", 0.01, "simulator: share of attempts answered with an incomplete finding")
	fs.Float64Var(&c.Sim.AsyncRate, "sim-async-rate", 0.1, "simulator: share of attempts answered 202, the finding following by signed callback")
	fs.Float64Var(&c.Sim.LateCallbackRate, "sim-late-callback-rate", 0.05, "simulator: share of callbacks sent after the attempt's timeout")
	fs.Float64Var(&c.Sim.RejectRate, "sim-reject-rate", 0.1, "simulator: share of findings that reject")
	fs.BoolVar(&c.Verbose, "v", false, "log the service's warnings to stderr (errors are always logged)")
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if *poolConns < 0 || *poolConns > 10000 {
		return Config{}, fmt.Errorf("-pool-max-conns: must be between 0 and 10000, got %d", *poolConns)
	}
	c.PoolConns = int32(*poolConns)
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected arguments %q: every setting is a flag", fs.Args())
	}
	return c, c.Validate()
}
