// Command reviewledger-bench measures reviewledger end to end against a
// naive table, in the same run: the real binary (reviewledger serve) over
// HTTP on loopback with an instant provider served here, N reviews from C
// clients, every decision read back through the public API; each round
// followed by a round of the CRUD baseline (one table, one row per review:
// INSERT pending, UPDATE attempts, UPDATE state, each its own autocommit
// statement). It prints per round and as medians: reviews/s, the ratio to
// CRUD, the server-side submit → decision p50/p99 (from each review's own
// timestamps), CPU ms per review and peak RSS of the server; then a latency
// run at half the measured peak rate with its p99. In every round it also
// measures the floors (floor.go): the same submit and provider call
// served with nothing stored, and with the CRUD baseline's statements
// behind them, so that the ratio target can be read against what the API
// alone costs. Last, pairs of rounds on a private primary with a streaming
// standby, asynchronous then synchronous, give the synchronous standby's
// cost as a ratio (standby.go). A figure under its target is marked BELOW TARGET. Every
// review must end accepted, or the run fails (exit 1).
//
//	go build -o bin/reviewledger ./cmd/reviewledger
//	go run ./cmd/reviewledger-bench -bin bin/reviewledger
//
// The scale command (scale.go, make bench-scale) grows one ledger to
// millions of reviews through the product's own write path and measures
// it there: end to end against the empty ledger, the queue and SLO
// queries, the catch-up, rebuild and audit, the retention purge, bytes per
// review and a steady load:
//
//	go run ./cmd/reviewledger-bench scale -bin bin/reviewledger -reviews 1000000
//
// docs/benchmarks.md has the figures and how to read them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// Config is one benchmark run.
type Config struct {
	Bin         string        // the reviewledger binary
	AdminURL    string        // PostgreSQL server: a database per round is created and dropped there
	Reviews     int           // reviews per round
	Clients     int           // concurrent clients of reviewledger
	CRUDClients int           // concurrent clients of the baseline
	Rounds      int           // interleaved rounds
	LatencyRun  time.Duration // how long the latency run at half the peak rate lasts
	Timeout     time.Duration // bound of each phase
	ServeEnv    []string      // extra KEY=VALUE settings for serve
	KeepLogs    bool          // copy the servers' output to stderr
	Profile     string        // file to write a CPU profile of the server in round 1 to
	Observe     string        // how a client learns the decision: observeSubmit or observeGet
	Floors      bool          // measure the floors (floor.go) in every round
	Standby     bool          // measure the synchronous standby's cost (standby.go)
	Policy      string        // serve's policy file; benchPolicy when empty

	pg *pgServer // the PostgreSQL server when it runs on this machine (its CPU is measured)
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == floorCommand {
		os.Exit(floorServe(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == scaleCommand {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := scaleMain(ctx, os.Args[2:], os.Stdout)
		stop()
		os.Exit(code)
	}
	cfg, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if errors.Is(err, errFlags) {
		os.Exit(2) // the flag package has said what is wrong, with the usage
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "reviewledger-bench:", err)
		os.Exit(2)
	}
	os.Exit(runMain(cfg))
}

// errFlags marks a command line the flag package refused (and reported).
var errFlags = errors.New("command line")

// parseFlags reads the command line into a valid Config.
func parseFlags(args []string) (Config, error) {
	var cfg Config
	fs := flag.NewFlagSet("reviewledger-bench", flag.ContinueOnError)
	fs.StringVar(&cfg.Bin, "bin", "bin/reviewledger", "the reviewledger binary to run (make build)")
	fs.StringVar(&cfg.AdminURL, "admin-url", envOr("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"),
		"PostgreSQL server on which each round creates and drops its database")
	fs.IntVar(&cfg.Reviews, "reviews", 5000, "reviews per round")
	fs.IntVar(&cfg.Clients, "clients", 32, "concurrent reviewledger clients")
	fs.IntVar(&cfg.CRUDClients, "crud-clients", 16, "concurrent clients of the CRUD baseline (and connections of the CRUD table floor)")
	fs.IntVar(&cfg.Rounds, "rounds", 3, "rounds, each reviewledger, then CRUD, then the floors")
	fs.DurationVar(&cfg.LatencyRun, "latency-run", 10*time.Second, "length of the latency run at half the peak rate (0: none)")
	fs.DurationVar(&cfg.Timeout, "timeout", 5*time.Minute, "bound of each phase")
	fs.BoolVar(&cfg.KeepLogs, "logs", false, "copy the servers' logs to stderr as they run")
	fs.StringVar(&cfg.Profile, "profile", "", "write a CPU profile of the server's first 5 seconds of the first round to this file (go tool pprof)")
	fs.StringVar(&cfg.Observe, "observe", observeSubmit,
		"how each client learns its decision: submit (the submit waits for it, POST /v1/reviews?wait=30s) or get (a long-poll after the submit, GET /v1/reviews/{id}?wait=30s)")
	fs.BoolVar(&cfg.Floors, "floors", true,
		"measure in every round the floors: the same submit and provider call served with nothing stored, and with the CRUD table's three statements (with -observe submit only: left out with -observe get, which refuses -floors)")
	fs.BoolVar(&cfg.Standby, "standby", true,
		"after the rounds, measure on a private primary with a streaming standby (started here) the rounds with the standby asynchronous and synchronous, as many pairs as -rounds, and print their ratio")
	var env multiFlag
	fs.Var(&env, "serve-env", "KEY=VALUE setting for serve (repeatable), e.g. REVIEWLEDGER_COMMIT_WINDOW=1ms")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return Config{}, err
		}
		return Config{}, fmt.Errorf("%w: %w", errFlags, err)
	}
	cfg.ServeEnv = env
	floorsGiven := false
	fs.Visit(func(f *flag.Flag) { floorsGiven = floorsGiven || f.Name == "floors" })
	if cfg.Observe == observeGet && !floorsGiven {
		cfg.Floors = false // measured with the submit's own wait only
	}
	return cfg, cfg.validate()
}

// runMain runs the benchmark and returns the exit status: 1 when it failed.
func runMain(cfg Config) int {
	// SIGTERM too: the databases of the round are dropped and serve stopped
	// on the way out.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg.pg = findPG(ctx, cfg.AdminURL)
	report, err := run(ctx, cfg)
	if report != nil {
		report.print(os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "reviewledger-bench:", err)
		return 1
	}
	return 0
}

func (c Config) validate() error {
	switch {
	case c.Reviews < 1:
		return fmt.Errorf("-reviews: must be at least 1, got %d", c.Reviews)
	case c.Clients < 1 || c.CRUDClients < 1:
		return fmt.Errorf("-clients and -crud-clients: must be at least 1")
	case c.Rounds < 1:
		return fmt.Errorf("-rounds: must be at least 1, got %d", c.Rounds)
	case c.Timeout <= 0:
		return fmt.Errorf("-timeout: must be positive, got %s", c.Timeout)
	case c.Observe != observeSubmit && c.Observe != observeGet:
		return fmt.Errorf("-observe: must be %s or %s, got %q", observeSubmit, observeGet, c.Observe)
	case c.Floors && c.Observe != observeSubmit:
		// A floor answers the decision with the submit: it has no
		// long-poll to measure.
		return fmt.Errorf("-floors: measured with -observe submit only, not with -observe %s (leave -floors out)", c.Observe)
	}
	if _, err := os.Stat(c.Bin); err != nil {
		return fmt.Errorf("-bin: %v (build it with make build)", err)
	}
	return nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

type multiFlag []string

func (m *multiFlag) String() string     { return fmt.Sprint(*m) }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }
