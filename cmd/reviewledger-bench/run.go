package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/reviewledger/reviewledger/cmd/benchtarget"
)

// Targets of the 2-core machine (docs/benchmarks.md).
const (
	targetRatio   = 1.0
	defectRatio   = 0.5
	targetP99     = 100 * time.Millisecond
	targetPeakRSS = 200_000_000 // bytes: 200 MB
)

// report is a run's figures.
type report struct {
	cfg     Config
	rounds  []round
	latency *latencyRun
	standby *standbyRun
}

type round struct {
	rl, crud figures
	// The floors (floor.go), when measured: the API and provider call
	// alone, and the CRUD table behind them.
	api, table *figures
}

type latencyRun struct {
	rate     float64 // aimed at
	reviews  int
	elapsed  time.Duration
	p50, p99 time.Duration
}

func run(ctx context.Context, cfg Config) (*report, error) {
	rep := &report{cfg: cfg}
	for i := range cfg.Rounds {
		rl, _, cleanup, err := reviewledgerRound(ctx, cfg)
		if cleanup != nil {
			err = errors.Join(err, cleanup())
		}
		if err != nil {
			return rep, fmt.Errorf("round %d, reviewledger: %w", i+1, err)
		}
		cfg.Profile = "" // the first round's only
		crud, err := crudRound(ctx, cfg)
		if err != nil {
			return rep, fmt.Errorf("round %d: %w", i+1, err)
		}
		rep.rounds = append(rep.rounds, round{rl: rl, crud: crud})
		if cfg.Floors { // a floor that fails leaves the round's other figures printed
			rd := &rep.rounds[len(rep.rounds)-1]
			if rd.api, rd.table, err = floors(ctx, cfg); err != nil {
				return rep, fmt.Errorf("round %d: %w", i+1, err)
			}
		}
	}
	if cfg.LatencyRun > 0 {
		lr, err := latency(ctx, cfg, median(rep.rounds, func(r round) float64 { return r.rl.PerSecond })/2)
		if err != nil {
			return rep, fmt.Errorf("latency run: %w", err)
		}
		rep.latency = lr
	}
	if cfg.Standby {
		sr, err := standbyRounds(ctx, cfg, cfg.Rounds)
		rep.standby = sr
		if err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// floors runs a round of each floor.
func floors(ctx context.Context, cfg Config) (api, table *figures, err error) {
	a, err := floorRound(ctx, cfg, floorAPI)
	if err != nil {
		return nil, nil, err
	}
	t, err := floorRound(ctx, cfg, floorTable)
	if err != nil {
		return nil, nil, err
	}
	return &a, &t, nil
}

// latency runs reviews arriving at rate per second on a fresh server.
func latency(ctx context.Context, cfg Config, rate float64) (*latencyRun, error) {
	dbURL, drop, err := database(ctx, cfg.AdminURL)
	if err != nil {
		return nil, err
	}
	defer func() { _ = drop() }()
	prov, provURL, err := instantProvider()
	if err != nil {
		return nil, err
	}
	defer prov.Close()
	srv, err := startServer(ctx, cfg, "", dbURL, provURL)
	if err != nil {
		return nil, err
	}
	c := newClient(srv.URL, srv.token, cfg.Clients, cfg.Observe)
	rctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	if _, err := closedLoop(rctx, c, 0, min(200, cfg.Reviews/10+1), cfg.Clients); err != nil {
		return nil, errors.Join(fmt.Errorf("warm-up: %w", err), srv.stop())
	}
	start := time.Now()
	latencies, behind, err := openLoop(rctx, c, 1_000_000, rate, cfg.LatencyRun)
	elapsed := time.Since(start)
	if behind.n > 0 {
		err = errors.Join(err, fmt.Errorf("the service fell behind %.0f reviews/s: arrivals not sent with %d unanswered: %s", rate, maxInFlight, behind))
	}
	if err = errors.Join(err, srv.stop()); err != nil {
		return nil, err
	}
	return &latencyRun{rate: rate, reviews: len(latencies), elapsed: elapsed,
		p50: benchtarget.Quantile(latencies, 0.5), p99: benchtarget.Quantile(latencies, 0.99)}, nil
}

func median(rounds []round, f func(round) float64) float64 {
	xs := make([]float64, len(rounds))
	for i, r := range rounds {
		xs[i] = f(r)
	}
	slices.Sort(xs)
	if len(xs) == 0 {
		return 0
	}
	if len(xs)%2 == 1 {
		return xs[len(xs)/2]
	}
	return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
}

// verdict marks a figure against its target.
func verdict(ok bool) string {
	if ok {
		return "ok"
	}
	return "BELOW TARGET"
}

// ratioVerdict marks a ratio to CRUD against its target.
func ratioVerdict(ratio float64) string {
	if ratio < defectRatio {
		return "BELOW TARGET (under 0.5: a defect)"
	}
	return verdict(ratio >= targetRatio)
}

// roundVerdict marks one round's figures that have a target of their own:
// the ratio, and the peak RSS of its burst.
func roundVerdict(rd round) string {
	var missed []string
	if rd.rl.PerSecond/rd.crud.PerSecond < targetRatio {
		missed = append(missed, "ratio")
	}
	if rd.rl.PeakRSS >= targetPeakRSS {
		missed = append(missed, "RSS")
	}
	if len(missed) == 0 {
		return "ok"
	}
	return "BELOW TARGET (" + strings.Join(missed, ", ") + ")"
}

// highestRSS is the highest peak RSS of the rounds.
func highestRSS(rounds []round) uint64 {
	var m uint64
	for _, r := range rounds {
		m = max(m, r.rl.PeakRSS)
	}
	return m
}

func (r *report) print(w io.Writer) {
	cfg := r.cfg
	fmt.Fprintf(w, "reviewledger end to end: %d reviews per round from %d clients (CRUD baseline: %d clients), %d rounds, %d CPUs, %s\n",
		cfg.Reviews, cfg.Clients, cfg.CRUDClients, len(r.rounds), runtime.NumCPU(), runtime.Version())
	fmt.Fprintf(w, "decisions observed: %s\n", map[string]string{
		observeSubmit: "by the submit's own wait (POST /v1/reviews?wait=30s)",
		observeGet:    "by a long-poll after the submit (GET /v1/reviews/{id}?wait=30s)",
	}[cfg.Observe])
	fmt.Fprintf(w, "%-7s %14s %10s %7s %9s %9s %13s  %-30s %-30s %s\n", "round", "reviewledger/s", "crud/s", "ratio", "p50", "p99", "peak RSS",
		"CPU/review: server+pg+bench", "CRUD: pg+bench", "targets")
	row := func(name string, rl, crud float64, ratio float64, p50, p99 time.Duration, rss float64, c, cc cpuShare, targets string) {
		line := fmt.Sprintf("%-7s %14.0f %10.0f %7.3f %9s %9s %10.0f MB  %-30s %-30s %s", name, rl, crud, ratio, ms(p50), ms(p99), rss/1e6,
			cpuText(c, true, cfg.pg != nil), cpuText(cc, false, cfg.pg != nil), targets)
		fmt.Fprintln(w, strings.TrimRight(line, " "))
	}
	for i, rd := range r.rounds {
		row(strconv.Itoa(i+1), rd.rl.PerSecond, rd.crud.PerSecond, rd.rl.PerSecond/rd.crud.PerSecond, rd.rl.P50, rd.rl.P99,
			float64(rd.rl.PeakRSS), rd.rl.CPU, rd.crud.CPU, roundVerdict(rd))
	}
	if len(r.rounds) == 0 {
		return
	}
	med := func(f func(round) float64) float64 { return median(r.rounds, f) }
	dur := func(f func(round) time.Duration) time.Duration {
		return time.Duration(med(func(x round) float64 { return float64(f(x)) }))
	}
	ratio := med(func(x round) float64 { return x.rl.PerSecond / x.crud.PerSecond })
	rss := med(func(x round) float64 { return float64(x.rl.PeakRSS) })
	rlCPU := cpuShare{Server: dur(func(x round) time.Duration { return x.rl.CPU.Server }),
		Postgres: dur(func(x round) time.Duration { return x.rl.CPU.Postgres }), Bench: dur(func(x round) time.Duration { return x.rl.CPU.Bench })}
	crudCPU := cpuShare{Postgres: dur(func(x round) time.Duration { return x.crud.CPU.Postgres }), Bench: dur(func(x round) time.Duration { return x.crud.CPU.Bench })}
	row("median", med(func(x round) float64 { return x.rl.PerSecond }), med(func(x round) float64 { return x.crud.PerSecond }), ratio,
		dur(func(x round) time.Duration { return x.rl.P50 }), dur(func(x round) time.Duration { return x.rl.P99 }), rss, rlCPU, crudCPU,
		"")
	fmt.Fprintf(w, "group commit by round (stream appends per batch, share of the round a batch was being written):")
	for i, rd := range r.rounds {
		fmt.Fprintf(w, "  %d: %.1f, %.0f%%", i+1, rd.rl.Commits.perBatch(), 100*rd.rl.Commits.busy(rd.rl.Elapsed))
	}
	fmt.Fprintln(w)
	r.printFloors(w)
	fmt.Fprintf(w, "ratio to CRUD, median of the rounds %.3f (target >= %.1f): %s\n", ratio, targetRatio, ratioVerdict(ratio))
	peak := highestRSS(r.rounds)
	fmt.Fprintf(w, "peak RSS, highest of the rounds %.0f MB (target < %d MB): %s\n", float64(peak)/1e6, targetPeakRSS/1_000_000, verdict(peak < targetPeakRSS))
	if l := r.latency; l != nil {
		fmt.Fprintf(w, "latency run aimed at %.0f reviews/s (half the median peak), %d reviews at %.0f/s: p50 %s, p99 %s (target < %s): %s\n",
			l.rate, l.reviews, float64(l.reviews)/l.elapsed.Seconds(), ms(l.p50), ms(l.p99), targetP99, verdict(l.p99 < targetP99))
	}
	r.standby.print(w)
}

// printFloors prints the floors by round and their medians, when they
// were measured.
func (r *report) printFloors(w io.Writer) {
	var measured []round
	for _, rd := range r.rounds {
		if rd.api != nil && rd.table != nil {
			measured = append(measured, rd)
		}
	}
	if len(measured) == 0 {
		return
	}
	pg := r.cfg.pg != nil
	fmt.Fprintln(w, "floors by round, the same submit and provider call served with nothing stored, then with the CRUD table's three statements (reviews/s, ratio to the round's CRUD, CPU/review server+pg+bench):")
	for i, rd := range r.rounds {
		if rd.api == nil || rd.table == nil {
			continue
		}
		fmt.Fprintf(w, "  %d: nothing stored %.0f/s %.3f %s; CRUD table %.0f/s %.3f %s\n", i+1,
			rd.api.PerSecond, rd.api.PerSecond/rd.crud.PerSecond, cpuText(rd.api.CPU, true, pg),
			rd.table.PerSecond, rd.table.PerSecond/rd.crud.PerSecond, cpuText(rd.table.CPU, true, pg))
	}
	ratioOf := func(f func(round) *figures) float64 {
		return median(measured, func(x round) float64 { return f(x).PerSecond / x.crud.PerSecond })
	}
	// CPU per review, every process's, is steadier than a rate on a
	// shared machine: it says what each way of serving a review costs.
	cpuOf := func(f func(round) *figures) float64 {
		return median(measured, func(x round) float64 { return msf(f(x).CPU.total()) })
	}
	api := func(x round) *figures { return x.api }
	table := func(x round) *figures { return x.table }
	rl := func(x round) *figures { return &x.rl }
	crud := func(x round) *figures { return &x.crud }
	fmt.Fprintf(w, "floors, medians of the rounds: nothing stored %.3f, CRUD table behind the API %.3f, reviewledger %.3f (ratios to CRUD); reviewledger to the CRUD table behind the API %.3f\n",
		ratioOf(api), ratioOf(table), ratioOf(rl), median(measured, func(x round) float64 { return x.rl.PerSecond / x.table.PerSecond }))
	fmt.Fprintf(w, "CPU per review, every process, medians of the rounds: nothing stored %.2fms, CRUD table behind the API %.2fms, reviewledger %.2fms, CRUD %.2fms\n",
		cpuOf(api), cpuOf(table), cpuOf(rl), cpuOf(crud))
}

// cpuText is a round's CPU per review, "server+pg+bench=total" (the
// server's part only for reviewledger; pg "-" when PostgreSQL is not on
// this machine).
func cpuText(c cpuShare, server, pg bool) string {
	var parts []string
	total := c.Bench
	if server {
		parts = append(parts, fmt.Sprintf("%.2f", msf(c.Server)))
		total += c.Server
	}
	if pg {
		parts = append(parts, fmt.Sprintf("%.2f", msf(c.Postgres)))
		total += c.Postgres
	} else {
		parts = append(parts, "-")
	}
	parts = append(parts, fmt.Sprintf("%.2f", msf(c.Bench)))
	return fmt.Sprintf("%s=%.2fms", strings.Join(parts, "+"), msf(total))
}

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond)) }
