package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/reviewledger/reviewledger/api/engine/work/pgwork"
	"github.com/reviewledger/reviewledger/cmd/benchtarget"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/clock"
	"github.com/reviewledger/reviewledger/eventstore/pgstore"
	"github.com/reviewledger/reviewledger/projections"
)

// grow writes the ledger, catches the read models up on it as a serving
// process would, and prints what it wrote and what it takes on disk.
func (r *scaleRun) grow(ctx context.Context) error {
	r.load = loadConfig{Reviews: r.sc.Reviews, Waiting: r.sc.Waiting, Span: time.Duration(r.sc.Days) * 24 * time.Hour,
		End: time.Now().Add(-time.Hour), Writers: r.sc.Writers, Seed: 1, IDs: r.sc.IDs}
	st, err := growLedger(ctx, r.pool, r.load)
	if err != nil {
		return fmt.Errorf("grow the ledger: %w", err)
	}
	r.line("growth (the product's write path)", fmt.Sprintf("%d reviews, %d events in %s: %.0f reviews/s", st.Reviews, st.Events,
		st.Elapsed.Round(time.Millisecond), float64(st.Reviews)/st.Elapsed.Seconds()), "", "")
	r.line("  final states", statesText(st.States), "", "")
	pg := pgstore.New(r.pool, pgstore.Config{})
	defer pg.Close()
	runner, err := projections.NewRunner(projections.Config{Pool: r.pool, Store: pg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	stopProfile, err := startProfile(r.sc.Profile)
	if err != nil {
		return err
	}
	start := time.Now()
	err = runner.CatchUpConcurrently(ctx)
	d := time.Since(start)
	if err = errors.Join(err, stopProfile()); err != nil {
		return fmt.Errorf("catch up: %w", err)
	}
	events, err := r.count(ctx, `SELECT count(*) FROM event`)
	if err != nil {
		return err
	}
	rate := float64(events) / d.Seconds()
	r.line("projections catch-up at N (all read models)", fmt.Sprintf("%d events in %s: %.0f events/s", events, d.Round(time.Millisecond), rate),
		fmt.Sprintf(">= %d/s", targetRebuildRate), benchtarget.Verdict(rate, targetRebuildRate))
	// What autovacuum does in the background while a ledger grows over
	// months: the growth took minutes. (Done before the catch-up as well,
	// it gained nothing: 59,994 against 67,166 events/s at 1,000,000
	// reviews, by turns.)
	start = time.Now()
	if _, err := r.pool.Exec(ctx, `VACUUM (ANALYZE)`); err != nil {
		return fmt.Errorf("vacuum after the growth: %w", err)
	}
	r.line("  VACUUM (ANALYZE) after the growth", time.Since(start).Round(time.Millisecond).String(), "", "")
	return r.bytes(ctx, "bytes per review on disk", events)
}

// autovacuumOn reports whether the server runs autovacuum.
func (r *scaleRun) autovacuumOn(ctx context.Context) (bool, error) {
	var on string
	if err := r.pool.QueryRow(ctx, `SHOW autovacuum`).Scan(&on); err != nil {
		return false, err
	}
	return on == "on", nil
}

// vacuumEvery vacuums the steady tables every interval until ctx ends, as
// autovacuum would on a server that runs it: the steady state is the
// product's on a server configured as the default has it.
func (r *scaleRun) vacuumEvery(ctx context.Context, interval time.Duration) error {
	for {
		if err := clock.Sleep(ctx, interval); err != nil {
			return nil
		}
		for _, t := range steadyTables {
			if _, err := r.pool.Exec(ctx, `VACUUM (ANALYZE) `+t); err != nil && ctx.Err() == nil {
				return fmt.Errorf("vacuum %s: %w", t, err)
			}
		}
	}
}

// startProfile starts a CPU profile of this process into file, when one
// is named, and returns what stops it.
func startProfile(file string) (stop func() error, err error) {
	if file == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(file)
	if err != nil {
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	return func() error { pprof.StopCPUProfile(); return f.Close() }, nil
}

func statesText(states map[domain.State]int64) string {
	keys := slices.Sorted(maps.Keys(states))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, states[k])
	}
	return strings.Join(parts, ", ")
}

func (r *scaleRun) count(ctx context.Context, sql string, args ...any) (int64, error) {
	var n int64
	if err := r.pool.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("%s: %w", sql, err)
	}
	return n, nil
}

// contentTables hold the reviewed content, which retention purges.
var contentTables = []string{"review_payload"}

// bytes prints the bytes per review on disk, every table with its indexes
// and TOAST counted, without the content and with it, and the tables
// that take the most (where the bytes go); what names the figure.
func (r *scaleRun) bytes(ctx context.Context, what string, events int64) error {
	reviews, err := r.count(ctx, `SELECT count(*) FROM review_summary`)
	if err != nil {
		return err
	}
	// The partitions of event count as event (pg_partition_root).
	rows, err := r.pool.Query(ctx, `SELECT coalesce(pg_partition_root(relid)::text, relname),
			sum(pg_total_relation_size(relid))::bigint, sum(pg_relation_size(relid))::bigint, sum(pg_indexes_size(relid))::bigint
		FROM pg_stat_user_tables WHERE schemaname = current_schema() GROUP BY 1 ORDER BY 2 DESC`)
	if err != nil {
		return err
	}
	type size struct {
		name                 string
		total, heap, indexes int64
	}
	var sizes []size
	var all, content int64
	for rows.Next() {
		var s size
		if err := rows.Scan(&s.name, &s.total, &s.heap, &s.indexes); err != nil {
			rows.Close()
			return err
		}
		sizes = append(sizes, s)
		all += s.total
		if slices.Contains(contentTables, s.name) {
			content += s.total
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	per := func(b int64) float64 { return float64(b) / float64(max(reviews, 1)) }
	r.line(what+", content excluded", fmt.Sprintf("%.0f B (%d reviews, %.2f events each)", per(all-content), reviews, float64(events)/float64(max(reviews, 1))),
		fmt.Sprintf("<= %d B", targetBytesNoContent), benchtarget.VerdictUnder(per(all-content), targetBytesNoContent+1))
	r.line(what+", content included", fmt.Sprintf("%.0f B", per(all)), "", "")
	for _, s := range sizes {
		if per(s.total) < 1 {
			continue
		}
		r.line("  "+s.name, fmt.Sprintf("%.0f B/review (heap+TOAST %.0f, indexes %.0f)", per(s.total), per(s.total-s.indexes), per(s.indexes)), "", "")
	}
	return nil
}

// get measures path's latency over the samples, as role's token, and
// returns its p99.
func (r *scaleRun) get(ctx context.Context, token, path string) (time.Duration, error) {
	c := newClient(r.srv.URL, token, 1, observeSubmit)
	lat := make([]time.Duration, 0, r.sc.Samples)
	for i := range r.sc.Samples + 1 {
		start := time.Now()
		status, body, err := c.do(ctx, http.MethodGet, path, nil)
		d := time.Since(start)
		if err != nil {
			return 0, fmt.Errorf("GET %s: %w", path, err)
		}
		if status != http.StatusOK {
			return 0, fmt.Errorf("GET %s: HTTP %d %s", path, status, body)
		}
		if i > 0 { // the first warms the path
			lat = append(lat, d)
		}
	}
	return benchtarget.Quantile(lat, 0.99), nil
}

// worst measures each path and prints the highest p99, naming its path.
func (r *scaleRun) worst(ctx context.Context, name, token string, paths []string, target time.Duration) error {
	var worst time.Duration
	var at string
	for _, p := range paths {
		d, err := r.get(ctx, token, p)
		if err != nil {
			return err
		}
		if d >= worst {
			worst, at = d, p
		}
	}
	r.line(fmt.Sprintf("%s p99, worst of %d queries", name, len(paths)), ms(worst), "< "+ms(target), benchtarget.VerdictUnder(msf(worst), msf(target)))
	r.line("  the worst", at, "", "")
	return nil
}

// queries measures the manual queue with every filter and order the UI
// offers, and the SLO summary and series over 30 days.
func (r *scaleRun) queries(ctx context.Context) error {
	waiting, err := r.count(ctx, `SELECT count(*) FROM manual_queue`)
	if err != nil {
		return err
	}
	var queue []string
	for _, order := range []string{"", "due"} {
		for _, filter := range []string{"", "content_class=bench_media", "reason=provider_refused", "reason=deadline_passed",
			"content_class=bench&reason=deadline_passed"} {
			for _, limit := range []string{"100", "1000"} {
				q := "held=any&limit=" + limit
				if filter != "" {
					q += "&" + filter
				}
				if order != "" {
					q += "&order=" + order
				}
				queue = append(queue, "/v1/manual-queue?"+q)
			}
		}
	}
	r.line("manual queue", fmt.Sprintf("%d waiting", waiting), "", "")
	if err := r.worst(ctx, "GET /v1/manual-queue", moderatorToken, queue, targetQueueP99); err != nil {
		return err
	}
	slo := []string{"/v1/slo?window=30d", "/v1/slo?window=30d&content_class=bench", "/v1/slo?window=24h", "/v1/slo?window=1h",
		"/v1/slo/series?window=30d", "/v1/slo/series?window=30d&content_class=bench", "/v1/slo/series?window=24h"}
	return r.worst(ctx, "GET /v1/slo and /v1/slo/series", auditorToken, slo, targetSLOP99)
}

// purge runs the product's retention purge (pgwork, as the engine's
// purge runs it) of the content stored longer than the retention, while
// reviews arrive at rate, and prints its rate and the longest submit →
// decision of the reviews submitted meanwhile.
func (r *scaleRun) purge(ctx context.Context, rate float64) error {
	store := pgwork.New(r.pool, nil)
	cutoff := time.Now().Add(-scaleRetention)
	due, err := r.count(ctx, `SELECT count(*) FROM review_payload WHERE stored_at < $1`, cutoff)
	if err != nil {
		return err
	}
	c := newClient(r.srv.URL, r.srv.token, r.sc.Clients, observeSubmit)
	var (
		mu        sync.Mutex
		purging   = true
		latencies []time.Duration
		behind    unsent
		loopErr   error
		wg        sync.WaitGroup
	)
	stillPurging := func(time.Time) bool { mu.Lock(); defer mu.Unlock(); return !purging }
	wg.Go(func() { latencies, behind, loopErr = openLoopUntil(ctx, c, 0, rate, maxInFlight, stillPurging) })
	start := time.Now()
	n, err := store.PurgePayloads(ctx, cutoff) // the cutoff counted: exactly those
	d := time.Since(start)
	mu.Lock()
	purging = false
	mu.Unlock()
	wg.Wait()
	if err = errors.Join(err, loopErr); err != nil {
		return fmt.Errorf("purge: %w", err)
	}
	if n != due {
		return fmt.Errorf("purge: %d contents purged, %d were past the retention", n, due)
	}
	r.check(fmt.Sprintf("purge removed all %d contents past the retention", n))
	r.line("retention purge", fmt.Sprintf("%d rows in %s: %.0f rows/s", n, d.Round(time.Millisecond), float64(n)/d.Seconds()), "", "")
	longest := slices.Max(append(latencies, 0))
	r.line("  longest submit → decision meanwhile", fmt.Sprintf("%s (%d reviews at %.0f/s)", ms(longest), len(latencies), rate),
		"< "+ms(targetPurgeBlock), benchtarget.VerdictUnder(msf(longest), msf(targetPurgeBlock)))
	r.behind(behind)
	return nil
}

// behind prints, when an open loop fell behind its rate, how many
// arrivals it did not send (maxInFlight were unanswered) and when they
// were due: the service did not keep up, a miss of the phase's target.
func (r *scaleRun) behind(u unsent) {
	if u.n > 0 {
		r.line("  arrivals not sent, the service behind", fmt.Sprintf("%s (%d unanswered at once)", u, maxInFlight), "0", benchtarget.Below)
	}
}

// steadyTables are the tables whose size must stay flat under a steady
// load: each holds live rows only (work in progress, the queue, the SLO
// and provider buckets).
var steadyTables = []string{"review_work", "manual_queue", "manual_queue_candidate", "slo_open", "slo_minute", "slo_latency",
	"slo_attempt", "slo_conflict", "slo_queue", "slo_hour", "slo_latency_hour", "slo_attempt_hour", "slo_conflict_hour",
	"provider_open", "provider_minute", "provider_latency", "provider_confusion"}

type tableSize struct {
	total, indexes, live, dead int64
}

func (r *scaleRun) tableSizes(ctx context.Context) (map[string]tableSize, error) {
	rows, err := r.pool.Query(ctx, `SELECT relname, pg_total_relation_size(relid), pg_indexes_size(relid), n_live_tup, n_dead_tup
		FROM pg_stat_user_tables WHERE schemaname = current_schema() AND relname = ANY($1)`, steadyTables)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]tableSize{}
	for rows.Next() {
		var name string
		var s tableSize
		if err := rows.Scan(&name, &s.total, &s.indexes, &s.live, &s.dead); err != nil {
			return nil, err
		}
		out[name] = s
	}
	return out, rows.Err()
}

// steadyMargin is how much a table may grow under the steady load and
// still be flat: a tenth, and a few pages.
const steadyMargin = 0.1

// steady runs reviews at rate for the steady load's length and prints the
// steady tables' sizes before and after.
func (r *scaleRun) steady(ctx context.Context, rate float64) error {
	if r.sc.Steady == 0 {
		return nil
	}
	before, err := r.tableSizes(ctx)
	if err != nil {
		return err
	}
	on, err := r.autovacuumOn(ctx)
	if err != nil {
		return err
	}
	vctx, stopVacuum := context.WithCancel(ctx)
	vacuumed := make(chan error, 1)
	if on {
		vacuumed <- nil
	} else {
		r.line("  the server's autovacuum is off", "the bench vacuums the tables every minute", "", "")
		go func() { vacuumed <- r.vacuumEvery(vctx, time.Minute) }()
	}
	c := newClient(r.srv.URL, r.srv.token, r.sc.Clients, observeSubmit)
	latencies, behind, err := openLoop(ctx, c, 0, rate, r.sc.Steady)
	stopVacuum()
	if err = errors.Join(err, <-vacuumed); err != nil {
		return fmt.Errorf("steady load: %w", err)
	}
	after, err := r.tableSizes(ctx)
	if err != nil {
		return err
	}
	r.line("steady load at half the peak", fmt.Sprintf("%d reviews in %s at %.0f/s, p99 %s", len(latencies), r.sc.Steady, rate, ms(benchtarget.Quantile(latencies, 0.99))), "", "")
	r.behind(behind)
	var grew []string
	for _, name := range steadyTables {
		b, a := before[name], after[name]
		flat := float64(a.total) <= float64(b.total)*(1+steadyMargin)+32<<10
		if !flat {
			grew = append(grew, name)
		}
		verdict := "flat"
		if !flat {
			verdict = benchtarget.Below + " (grew)"
		}
		r.line("  "+name, fmt.Sprintf("%s → %s (idx %s → %s), live %d → %d, dead %d → %d", kb(b.total), kb(a.total), kb(b.indexes), kb(a.indexes),
			b.live, a.live, b.dead, a.dead), "flat", verdict)
	}
	verdict := "ok"
	if len(grew) > 0 {
		verdict = benchtarget.Below + " (" + strings.Join(grew, ", ") + " grew)"
	}
	r.line("steady tables flat", fmt.Sprintf("%d of %d", len(steadyTables)-len(grew), len(steadyTables)), fmt.Sprintf("<= +%.0f%%", 100*steadyMargin), verdict)
	return nil
}

func kb(b int64) string { return fmt.Sprintf("%.0f kB", float64(b)/1024) }

// cli runs the reviewledger command with args on the run's database and
// returns its output and how long it took.
func (r *scaleRun) cli(ctx context.Context, args ...string) (string, time.Duration, error) {
	cmd := exec.CommandContext(ctx, r.sc.Bin, args...)
	cmd.Env = append(cleanEnv(), "DATABASE_URL="+r.dbURL)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	d := time.Since(start)
	if err != nil {
		return string(out), d, fmt.Errorf("reviewledger %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), d, nil
}

// waitReadable waits until the store holds back no committed event (a
// transaction open anywhere on the server, another program's, holds the
// gap-safe order back): with nothing more written to the ledger, every
// event is then readable, and the catch-up that follows reads them all,
// as the rebuild will.
func waitReadable(ctx context.Context, pg *pgstore.Store) error {
	for {
		st, err := pg.Stall(ctx)
		if err != nil {
			return err
		}
		if st.HeldBack == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d events still held back by an open transaction: %w", st.HeldBack, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

var rebuiltLine = regexp.MustCompile(`rebuilt (\S+) \(version \d+\) from (\d+) events`)

// rebuild catches the live read models up, rebuilds them all with
// `reviewledger projections rebuild`, prints its rate and checks that the
// rebuilt read models hold exactly the rows the live ones did.
func (r *scaleRun) rebuild(ctx context.Context) error {
	pg := pgstore.New(r.pool, pgstore.Config{})
	defer pg.Close()
	runner, err := projections.NewRunner(projections.Config{Pool: r.pool, Store: pg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	if err := waitReadable(ctx, pg); err != nil {
		return err
	}
	if err := runner.CatchUp(ctx); err != nil {
		return fmt.Errorf("catch up: %w", err)
	}
	live, err := projections.Digests(ctx, r.pool)
	if err != nil {
		return err
	}
	out, d, err := r.cli(ctx, "projections", "rebuild")
	if err != nil {
		return err
	}
	rebuilt, err := projections.Digests(ctx, r.pool)
	if err != nil {
		return err
	}
	if !maps.Equal(live, rebuilt) {
		return fmt.Errorf("the rebuilt read models differ from the live ones:\n live    %v\n rebuilt %v", live, rebuilt)
	}
	r.check(fmt.Sprintf("projections rebuild equals the live read models (%d tables, digests compared)", len(live)))
	var events int64
	var parts []string
	for _, m := range rebuiltLine.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.ParseInt(m[2], 10, 64)
		events = max(events, n)
		parts = append(parts, m[1])
	}
	if len(parts) != len(projections.Names()) {
		return fmt.Errorf("projections rebuild: %d projections rebuilt, want %d:\n%s", len(parts), len(projections.Names()), out)
	}
	rate := float64(events) / d.Seconds()
	r.line("projections rebuild at N (all read models)", fmt.Sprintf("%d events in %s: %.0f events/s", events, d.Round(time.Millisecond), rate),
		fmt.Sprintf(">= %d/s", targetRebuildRate), benchtarget.Verdict(rate, targetRebuildRate))
	return nil
}

var auditLine = regexp.MustCompile(`audit verify: (\d+) reviews, (\d+) events checked: intact`)

// audit runs `reviewledger audit verify` on the whole ledger and on
// single reviews, and prints their rates. It returns how many events the
// whole verify checked.
func (r *scaleRun) audit(ctx context.Context) (int64, error) {
	out, d, err := r.cli(ctx, "audit", "verify")
	if err != nil {
		return 0, err
	}
	m := auditLine.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("audit verify: no intact summary in\n%s", out)
	}
	reviews, _ := strconv.ParseInt(m[1], 10, 64)
	if reviews < int64(r.sc.Reviews) {
		return 0, fmt.Errorf("audit verify: %d reviews verified, the ledger has more than %d", reviews, r.sc.Reviews)
	}
	events, _ := strconv.ParseInt(m[2], 10, 64)
	r.check(fmt.Sprintf("audit verify: %s reviews, %s events intact", m[1], m[2]))
	rate := float64(reviews) / d.Seconds()
	r.line("audit verify at N", fmt.Sprintf("%d reviews in %s: %.0f reviews/s", reviews, d.Round(time.Millisecond), rate),
		fmt.Sprintf(">= %d/s", targetAuditRate), benchtarget.Verdict(rate, targetAuditRate))
	// The verify has just anchored every review: what autovacuum then does
	// with those rows, done before the single reviews are timed, so that
	// they time the command rather than the wake of that write (the first
	// commands after it took 40-70 ms, against 19-33 after the vacuum).
	start := time.Now()
	if _, err := r.pool.Exec(ctx, `VACUUM (ANALYZE) audit_anchor_page`); err != nil {
		return 0, fmt.Errorf("vacuum the audit anchors: %w", err)
	}
	r.line("  VACUUM (ANALYZE) audit_anchor_page after it", time.Since(start).Round(time.Millisecond).String(), "", "")
	rng := rand.New(rand.NewPCG(3, 4))
	var lat, bare []time.Duration
	for range min(r.sc.Samples, 20) {
		id := r.load.reviewID(rng.IntN(r.sc.Reviews))
		out, d, err := r.cli(ctx, "audit", "verify", "--review", id)
		if err != nil {
			return 0, err
		}
		if m := auditLine.FindStringSubmatch(out); m == nil || m[1] != "1" {
			return 0, fmt.Errorf("audit verify --review %s: not one intact review in\n%s", id, out)
		}
		lat = append(lat, d)
		// The same binary started and ended with nothing to do: what of
		// the command is the process, whatever the ledger's size.
		if _, d, err = r.cli(ctx, "version"); err != nil {
			return 0, err
		}
		bare = append(bare, d)
	}
	p99 := benchtarget.Quantile(lat, 0.99)
	r.line("audit verify --review ID (the whole command)", fmt.Sprintf("p99 %s over %d reviews", ms(p99), len(lat)),
		"< "+ms(targetAuditOne), benchtarget.VerdictUnder(msf(p99), msf(targetAuditOne)))
	r.line("  of which the process (reviewledger version)", fmt.Sprintf("p99 %s, median %s", ms(benchtarget.Quantile(bare, 0.99)), ms(benchtarget.Quantile(bare, 0.5))), "", "")
	return events, nil
}
