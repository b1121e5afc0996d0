package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/cmd/benchtarget"
	"github.com/reviewledger/reviewledger/migrations"
)

// scaleCommand runs the benchmark at scale (make bench-scale): one ledger
// grown to -reviews reviews, then measured.
const scaleCommand = "scale"

// scaleConfig is one run of the benchmark at scale.
type scaleConfig struct {
	Bin, AdminURL string
	Reviews       int           // reviews the ledger is grown to
	Round         int           // reviews of each end-to-end measurement
	Pairs         int           // end-to-end measurements at the empty ledger and at N, in pairs
	Clients       int           // concurrent clients of each end-to-end measurement
	Waiting       int           // reviews left in the manual queue
	Days          int           // days the grown ledger's submissions span
	Steady        time.Duration // the steady load at half the peak (0: none)
	Writers       int           // reviews the loader writes at once
	Samples       int           // requests per query measured
	Timeout       time.Duration // bound of each phase
	KeepLogs      bool
	Keep          bool   // leave the database in place, printing its URL
	Profile       string // file to write a CPU profile of the catch-up to
	ServeProfile  string // directory to write CPU profiles of serve in the first pair to
	IDs           string // the form of the grown ledger's review IDs (scaleids.go)

	// database is a migrated database to grow instead of one created on
	// AdminURL (tests: the test's own); the run leaves it in place.
	// emptyDatabase, likewise, is the one the empty ledger is measured on
	// in every pair, instead of a fresh one for each.
	database, emptyDatabase string
}

// Retention of content in the run: the grown ledger spans more than it,
// so the oldest content is due for purging. Serve is given a longer one,
// so that its own purge (at start, then hourly) leaves the content for
// the bench to purge while it measures.
const (
	scaleRetention = 720 * time.Hour
	serveRetention = 100 * 365 * 24 * time.Hour
)

// parseScaleFlags reads the command line of the scale command.
func parseScaleFlags(args []string) (scaleConfig, error) {
	var sc scaleConfig
	fs := flag.NewFlagSet("reviewledger-bench scale", flag.ContinueOnError)
	fs.StringVar(&sc.Bin, "bin", "bin/reviewledger", "the reviewledger binary to run (make build)")
	fs.StringVar(&sc.AdminURL, "admin-url", envOr("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"),
		"PostgreSQL server on which the run creates and drops its database")
	fs.IntVar(&sc.Reviews, "reviews", 3_000_000, "reviews the ledger is grown to")
	fs.IntVar(&sc.Round, "round", 5000, "reviews of each end-to-end measurement (at the empty ledger and at -reviews)")
	fs.IntVar(&sc.Pairs, "pairs", 3, "end-to-end measurements at the empty ledger (a fresh database each) and at -reviews, one after the other, whose medians are compared")
	fs.StringVar(&sc.ServeProfile, "serve-profile", "", "write CPU profiles of serve's first 5 seconds of the first pair's rounds (empty.pprof, at-n.pprof) into this directory (go tool pprof)")
	fs.IntVar(&sc.Clients, "clients", 32, "concurrent clients of the end-to-end measurements")
	fs.IntVar(&sc.Waiting, "waiting", 10_000, "reviews of the grown ledger left waiting in the manual queue (at most a quarter of -reviews)")
	fs.IntVar(&sc.Days, "days", 35, "days the grown ledger's submissions span, ending now (more than the 30-day retention, so the oldest content is purged)")
	fs.DurationVar(&sc.Steady, "steady", 30*time.Minute, "length of the steady load at half the peak rate, with the work, queue and SLO tables' sizes before and after (0: none)")
	fs.IntVar(&sc.Writers, "writers", 512, "reviews the loader writes at once (their appends are group-committed)")
	fs.IntVar(&sc.Samples, "samples", 50, "requests measured per query")
	fs.DurationVar(&sc.Timeout, "timeout", 2*time.Hour, "bound of each phase")
	fs.BoolVar(&sc.KeepLogs, "logs", false, "copy serve's logs to stderr as it runs")
	fs.StringVar(&sc.Profile, "cpuprofile", "", "write a CPU profile of the projections' catch-up at N (it runs in the bench's process) to this file (go tool pprof)")
	fs.StringVar(&sc.IDs, "ids", idsNumber, "the form of the grown ledger's review IDs: "+idsNumber+" (scale-<i>), "+idsUUID4+" (random UUIDs) or "+idsUUID7+" (time-ordered UUIDs)")
	fs.BoolVar(&sc.Keep, "keep", false, "leave the grown database in place (its URL is printed) instead of dropping it")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return scaleConfig{}, err
		}
		return scaleConfig{}, fmt.Errorf("%w: %w", errFlags, err)
	}
	sc.Waiting = min(sc.Waiting, sc.Reviews/4)
	return sc, sc.validate()
}

func (sc scaleConfig) validate() error {
	switch {
	case sc.Reviews < 100:
		return fmt.Errorf("-reviews: must be at least 100, got %d", sc.Reviews)
	case sc.Round < 10:
		return fmt.Errorf("-round: must be at least 10, got %d", sc.Round)
	case sc.Pairs < 1:
		return fmt.Errorf("-pairs: must be at least 1, got %d", sc.Pairs)
	case sc.Clients < 1:
		return fmt.Errorf("-clients: must be at least 1, got %d", sc.Clients)
	case sc.Days < 31:
		return fmt.Errorf("-days: must be at least 31 (more than the 30-day retention), got %d", sc.Days)
	case sc.Steady < 0:
		return fmt.Errorf("-steady: must not be negative, got %s", sc.Steady)
	case sc.Writers < 1:
		return fmt.Errorf("-writers: must be at least 1, got %d", sc.Writers)
	case sc.Samples < 1:
		return fmt.Errorf("-samples: must be at least 1, got %d", sc.Samples)
	case sc.Timeout <= 0:
		return fmt.Errorf("-timeout: must be positive, got %s", sc.Timeout)
	}
	if err := validIDForm(sc.IDs); err != nil {
		return err
	}
	if _, err := os.Stat(sc.Bin); err != nil {
		return fmt.Errorf("-bin: %v (build it with make build)", err)
	}
	return nil
}

// serveConfig is the Config serve is started with in the run.
func (sc scaleConfig) serveConfig() Config {
	return Config{Bin: sc.Bin, AdminURL: sc.AdminURL, Clients: sc.Clients, Observe: observeSubmit, Timeout: sc.Timeout,
		KeepLogs: sc.KeepLogs, Policy: scalePolicy(),
		ServeEnv: []string{"REVIEWLEDGER_PAYLOAD_RETENTION=" + serveRetention.String()}}
}

// scaleMain runs the scale command and returns the exit status.
func scaleMain(ctx context.Context, args []string, out io.Writer) int {
	sc, err := parseScaleFlags(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errFlags):
		return 2
	case err != nil:
		fmt.Fprintln(os.Stderr, "reviewledger-bench scale:", err)
		return 2
	}
	if err := runScale(ctx, sc, out); err != nil {
		fmt.Fprintln(os.Stderr, "reviewledger-bench scale:", err)
		return 1
	}
	return 0
}

// scaleRun is the state of a run: its database, provider and server.
type scaleRun struct {
	sc      scaleConfig
	cfg     Config
	out     io.Writer
	dbURL   string
	pool    *pgxpool.Pool
	provURL string
	srv     *server
	checks  []string
	stats   *pairStats // while compare runs, on a server with pg_stat_statements
	load    loadConfig // how the ledger was grown
}

// runScale grows a ledger and prints every figure as it is measured.
func runScale(ctx context.Context, sc scaleConfig, out io.Writer) (err error) {
	dbURL, drop := sc.database, func() error { return nil }
	if dbURL == "" {
		if dbURL, drop, err = database(ctx, sc.AdminURL); err != nil {
			return err
		}
	}
	defer func() {
		if sc.Keep {
			fmt.Fprintf(out, "database kept: %s\n", dbURL)
			return
		}
		err = errors.Join(err, drop())
	}()
	prov, provURL, err := instantProvider()
	if err != nil {
		return err
	}
	defer prov.Close()
	r := &scaleRun{sc: sc, cfg: sc.serveConfig(), out: out, dbURL: dbURL, provURL: provURL}
	defer func() { err = errors.Join(err, r.stopServer()) }()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	r.pool = pool
	if _, err := migrations.Apply(ctx, pool); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	fmt.Fprintf(out, "reviewledger at scale: %d reviews over %d days, %d waiting in the manual queue, review IDs %s; end-to-end rounds of %d reviews from %d clients; %d CPUs, %s\n",
		sc.Reviews, sc.Days, sc.Waiting, sc.IDs, sc.Round, sc.Clients, runtime.NumCPU(), runtime.Version())
	var autovacuum string
	if err := pool.QueryRow(ctx, `SHOW autovacuum`).Scan(&autovacuum); err != nil {
		return err
	}
	fmt.Fprintf(out, "PostgreSQL autovacuum: %s\n", autovacuum)
	fmt.Fprintf(out, "%-44s %-34s %-14s %s\n", "figure", "value", "target", "verdict")
	return r.phases(ctx)
}

// phases measures, in order: the growth, the catch-up and the bytes, end
// to end at the empty ledger and at N, the queries, the purge, the steady
// load, the rebuild (and its equality with the live read models), the
// audit and the bytes again, with the anchors the audit left.
func (r *scaleRun) phases(ctx context.Context) error {
	if err := r.grow(ctx); err != nil {
		return err
	}
	empty, full, err := r.compare(ctx)
	if err != nil {
		return err
	}
	r.endToEndFigures(empty, full)
	if err := r.queries(ctx); err != nil {
		return err
	}
	if err := r.purge(ctx, full.PerSecond/2); err != nil {
		return err
	}
	if err := r.steady(ctx, full.PerSecond/2); err != nil {
		return err
	}
	if err := r.stopServer(); err != nil {
		return err
	}
	if err := r.rebuild(ctx); err != nil {
		return err
	}
	events, err := r.audit(ctx)
	if err != nil {
		return err
	}
	// The bytes again once the whole ledger has been verified, events of
	// its reviews in all: an audited ledger keeps an anchor a review
	// (audit_anchor_page), which the figure after the growth, before any audit,
	// has none of. The ledger has grown meanwhile by the end-to-end rounds
	// and the steady load.
	if err := r.bytes(ctx, "bytes per review on disk after audit verify", events); err != nil {
		return err
	}
	fmt.Fprintf(r.out, "checks passed: %s\n", strings.Join(r.checks, "; "))
	return nil
}

// line prints one figure: its name, value, target and verdict.
func (r *scaleRun) line(name, value, target, verdict string) {
	fmt.Fprintln(r.out, strings.TrimRight(fmt.Sprintf("%-44s %-34s %-14s %s", name, value, target, verdict), " "))
}

// check records a correctness check that passed.
func (r *scaleRun) check(what string) { r.checks = append(r.checks, what) }

// startServer starts serve on dbURL, with its profiling endpoints when
// profile names a file to write a profile to.
func (r *scaleRun) startServer(ctx context.Context, dbURL, profile string) error {
	cfg := r.cfg
	cfg.Profile = profile
	srv, err := startServer(ctx, cfg, "", dbURL, r.provURL)
	if err != nil {
		return err
	}
	r.srv = srv
	return nil
}

// compare measures end to end at the empty ledger and at N in pairs, one
// right after the other, so that whatever else loads the machine weighs
// on both alike, and returns the medians. It leaves serve running on the
// grown ledger.
//
// On a server that loads pg_stat_statements, it also prints where the
// database's time a review went in the rounds at the empty ledger and at N,
// statement by statement.
func (r *scaleRun) compare(ctx context.Context) (empty, full figures, err error) {
	var empties, fulls []figures
	stats, without := openStatementStats(ctx, r.sc.AdminURL)
	if stats == nil {
		r.line("  statement profile", "none: "+without, "", "")
	} else {
		defer stats.close(context.WithoutCancel(ctx))
		r.stats = &pairStats{stats: stats, empty: statements{}, full: statements{}}
		defer func() { r.stats = nil }()
	}
	for i := range r.sc.Pairs {
		profile := func(name string) string {
			if i > 0 || r.sc.ServeProfile == "" {
				return ""
			}
			return filepath.Join(r.sc.ServeProfile, name)
		}
		e, err := r.emptyRound(ctx, profile("empty.pprof"))
		if err != nil {
			return figures{}, figures{}, fmt.Errorf("end to end at the empty ledger: %w", err)
		}
		if err := r.startServer(ctx, r.dbURL, profile("at-n.pprof")); err != nil {
			return figures{}, figures{}, err
		}
		f, err := r.measured(ctx, r.dbURL, true, func() (figures, error) { return r.endToEnd(ctx, profile("at-n.pprof")) })
		if err != nil {
			return figures{}, figures{}, fmt.Errorf("end to end at %d reviews: %w", r.sc.Reviews, err)
		}
		if i < r.sc.Pairs-1 {
			if err := r.stopServer(); err != nil {
				return figures{}, figures{}, err
			}
		}
		empties, fulls = append(empties, e), append(fulls, f)
		r.line(fmt.Sprintf("  pair %d: empty, then at N", i+1), fmt.Sprintf("%.0f/s p99 %s; %.0f/s p99 %s", e.PerSecond, ms(e.P99), f.PerSecond, ms(f.P99)), "", "")
	}
	if r.stats != nil {
		r.printStatements(r.stats.empty, r.stats.full, r.stats.emptyReviews, r.stats.fullReviews)
	}
	return medianFigures(empties), medianFigures(fulls), nil
}

// pairStats collects the statement times of the pairs' rounds.
type pairStats struct {
	stats                     *statementStats
	empty, full               statements
	emptyReviews, fullReviews int
}

// measured runs round on the database of dbURL (at N when full) and adds
// the statements it ran to the pairs' profile, when there is one.
func (r *scaleRun) measured(ctx context.Context, dbURL string, full bool, round func() (figures, error)) (figures, error) {
	if r.stats == nil {
		return round()
	}
	if err := r.stats.stats.reset(ctx, dbURL); err != nil {
		return figures{}, fmt.Errorf("reset pg_stat_statements: %w", err)
	}
	f, err := round()
	if err != nil {
		return f, err
	}
	got, err := r.stats.stats.read(ctx, dbURL)
	if err != nil {
		return f, fmt.Errorf("read pg_stat_statements: %w", err)
	}
	reviews := r.sc.Round + r.warmUp()
	if full {
		r.stats.full.add(got)
		r.stats.fullReviews += reviews
	} else {
		r.stats.empty.add(got)
		r.stats.emptyReviews += reviews
	}
	return f, nil
}

// emptyRound measures end to end on an empty ledger: a fresh database,
// dropped after, or the one the run was given.
func (r *scaleRun) emptyRound(ctx context.Context, profile string) (f figures, err error) {
	url := r.sc.emptyDatabase
	if url == "" {
		var drop func() error
		if url, drop, err = database(ctx, r.sc.AdminURL); err != nil {
			return figures{}, err
		}
		defer func() { err = errors.Join(err, drop()) }()
	}
	if err := r.startServer(ctx, url, profile); err != nil {
		return figures{}, err
	}
	f, err = r.measured(ctx, url, false, func() (figures, error) { return r.endToEnd(ctx, profile) })
	return f, errors.Join(err, r.stopServer())
}

// medianFigures is the median rate and p99 of rounds, and their highest
// peak RSS.
func medianFigures(fs []figures) figures {
	rounds := make([]round, len(fs))
	for i, f := range fs {
		rounds[i] = round{rl: f}
	}
	return figures{
		PerSecond: median(rounds, func(x round) float64 { return x.rl.PerSecond }),
		P99:       time.Duration(median(rounds, func(x round) float64 { return float64(x.rl.P99) })),
		PeakRSS:   highestRSS(rounds),
	}
}

func (r *scaleRun) stopServer() error {
	if r.srv == nil {
		return nil
	}
	srv := r.srv
	r.srv = nil
	return srv.stop()
}

// warmUp is how many reviews an end-to-end round submits before it is
// measured.
func (r *scaleRun) warmUp() int { return min(200, r.sc.Round/10+1) }

// endToEnd runs a round of reviews from the clients (closed loop), after
// a short warm-up, on the running server.
func (r *scaleRun) endToEnd(ctx context.Context, profile string) (figures, error) {
	c := newClient(r.srv.URL, r.srv.token, r.sc.Clients, observeSubmit)
	rctx, cancel := context.WithTimeout(ctx, r.sc.Timeout)
	defer cancel()
	warm := r.warmUp()
	if _, err := closedLoop(rctx, c, 0, warm, r.sc.Clients); err != nil {
		return figures{}, fmt.Errorf("warm-up: %w", err)
	}
	profiled := make(chan error, 1)
	if profile != "" {
		go func() { profiled <- r.srv.profile(rctx, 5, profile) }()
	} else {
		profiled <- nil
	}
	start := time.Now()
	latencies, err := closedLoop(rctx, c, warm, r.sc.Round, r.sc.Clients)
	elapsed := time.Since(start)
	if err = errors.Join(err, <-profiled); err != nil {
		return figures{}, err
	}
	rss, err := r.srv.peakRSS()
	if err != nil {
		return figures{}, err
	}
	f := figures{Reviews: r.sc.Round, Elapsed: elapsed, PerSecond: float64(r.sc.Round) / elapsed.Seconds(), PeakRSS: rss}
	f.P50, f.P99 = benchtarget.Quantile(latencies, 0.5), benchtarget.Quantile(latencies, 0.99)
	return f, nil
}

// Targets at scale (docs/benchmarks.md, "At scale").
const (
	targetScaleRatio     = 0.9
	targetQueueP99       = 50 * time.Millisecond
	targetSLOP99         = 100 * time.Millisecond
	targetRebuildRate    = 100_000 // events/s
	targetAuditRate      = 50_000  // reviews/s
	targetAuditOne       = 50 * time.Millisecond
	targetPurgeBlock     = 100 * time.Millisecond
	targetBytesNoContent = 1200 // bytes per review
)

func (r *scaleRun) endToEndFigures(empty, full figures) {
	r.line(fmt.Sprintf("end to end at the empty ledger, median of %d", r.sc.Pairs),
		fmt.Sprintf("%.0f reviews/s, p99 %s, serve %.0f MB", empty.PerSecond, ms(empty.P99), float64(empty.PeakRSS)/1e6), "", "")
	r.line(fmt.Sprintf("end to end at %d reviews, median of %d", r.sc.Reviews, r.sc.Pairs),
		fmt.Sprintf("%.0f reviews/s, p99 %s, serve %.0f MB", full.PerSecond, ms(full.P99), float64(full.PeakRSS)/1e6), "", "")
	rate := full.PerSecond / empty.PerSecond
	r.line("  reviews/s at N / at the empty ledger", fmt.Sprintf("%.3f", rate), fmt.Sprintf(">= %.1f", targetScaleRatio), benchtarget.Verdict(rate, targetScaleRatio))
	// A p99 ratio: the empty ledger's p99 over N's, so that >= 0.9 means
	// N's p99 is at most about a tenth longer.
	p99 := float64(empty.P99) / float64(max(full.P99, time.Microsecond))
	r.line("  p99 at the empty ledger / at N", fmt.Sprintf("%.3f", p99), fmt.Sprintf(">= %.1f", targetScaleRatio), benchtarget.Verdict(p99, targetScaleRatio))
}
