package projections

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/pgstore"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
	"github.com/reviewledger/reviewledger/projections/internal/workload"
)

// waitCaughtUp waits until every projection has applied want events.
func waitCaughtUp(t *testing.T, pool *pgxpool.Pool, want int64) {
	t.Helper()
	clocktest.EventuallyShows(t, fmt.Sprintf("projections to reach %d events", want), func() (bool, string) {
		if count(t, pool, `SELECT count(*) FROM projection_checkpoint WHERE events = $1`, want) == int64(len(all())) {
			return true, ""
		}
		rows, _ := pool.Query(context.Background(), `SELECT name, events FROM projection_checkpoint`)
		got, _ := pgx.CollectRows(rows, pgx.RowToMap)
		return false, fmt.Sprint(got)
	})
}

// run starts r.Run and returns a function stopping it.
func run(t *testing.T, r *Runner) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// checkCounts compares the read models with what the workload wrote.
func checkCounts(t *testing.T, e *env, st workload.Stats) {
	t.Helper()
	if n := count(t, e.pool, `SELECT count(*) FROM review_summary`); n != st.Reviews {
		t.Errorf("review_summary: %d rows, want %d", n, st.Reviews)
	}
	for state, want := range st.States {
		if n := count(t, e.pool, `SELECT count(*) FROM review_summary WHERE state = $1`, string(state)); n != want {
			t.Errorf("review_summary: %d %s, want %d", n, state, want)
		}
	}
	if n := count(t, e.pool, `SELECT count(*) FROM manual_queue`); n != st.States[domain.StateManualReview] {
		t.Errorf("manual_queue: %d rows, want %d", n, st.States[domain.StateManualReview])
	}
	if n := count(t, e.pool, `SELECT coalesce(sum(submitted), 0) FROM slo_minute`); n != st.Reviews {
		t.Errorf("slo_minute: %d submitted, want %d", n, st.Reviews)
	}
	if n := count(t, e.pool, `SELECT coalesce(sum(n), 0) FROM slo_conflict`); n != st.Conflicts {
		t.Errorf("slo_conflict: %d, want %d", n, st.Conflicts)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM slo_open`); n != st.States[domain.StatePending]+st.States[domain.StateManualReview] {
		t.Errorf("slo_open: %d rows, want one per pending or manual review", n)
	}
	checkShadows(t, e, st)
}

// checkShadows compares the providers read model with the workload's
// recount of its shadow observations.
func checkShadows(t *testing.T, e *env, st workload.Stats) {
	t.Helper()
	for name, want := range st.Shadows {
		var got workload.ShadowStats
		if err := e.pool.QueryRow(context.Background(), `SELECT coalesce(sum(shadow_observed), 0), coalesce(sum(shadow_findings), 0),
			coalesce(sum(compared), 0), coalesce(sum(agreed), 0) FROM provider_minute WHERE provider = $1`, name).
			Scan(&got.Observed, &got.Findings, &got.Compared, &got.Agreed); err != nil {
			t.Fatal(err)
		}
		if got.Observed != want.Observed || got.Findings != want.Findings || got.Compared != want.Compared || got.Agreed != want.Agreed || want.Compared == 0 {
			t.Errorf("shadow %s: observed %d findings %d compared %d agreed %d, want %d %d %d %d (some compared)", name,
				got.Observed, got.Findings, got.Compared, got.Agreed, want.Observed, want.Findings, want.Compared, want.Agreed)
		}
		for cell, n := range want.Confusion {
			if c := count(t, e.pool, `SELECT coalesce(sum(n), 0) FROM provider_confusion WHERE provider = $1 AND shadow_state = $2 AND decided_state = $3`,
				name, string(cell[0]), string(cell[1])); c != n {
				t.Errorf("shadow %s: confusion %s/%s = %d, want %d", name, cell[0], cell[1], c, n)
			}
		}
		if c := count(t, e.pool, `SELECT coalesce(sum(n), 0) FROM provider_confusion WHERE provider = $1`, name); c != want.Compared {
			t.Errorf("shadow %s: confusion sums to %d, want %d", name, c, want.Compared)
		}
	}
}

func TestIncrementalEqualsRebuild(t *testing.T) {
	t.Parallel()
	// The last: every statement on pgx's simple protocol (which a
	// connection string chooses with default_query_exec_mode), the
	// arguments sent as untyped text.
	for _, backend := range []string{"memstore", "pgstore", "pgstore, simple protocol"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			if backend == "pgstore, simple protocol" {
				e.pool = dbtest.PoolWith(t, dbtest.SimpleProtocol)
				e.db = NewDB(e.pool)
			}
			if backend != "memstore" {
				s := pgstore.New(e.pool, pgstore.Config{PollInterval: 50 * time.Millisecond})
				t.Cleanup(s.Close)
				e.store, e.ledger = s, ledger.New(s)
			}
			r := e.runner(t, nil)
			stop := run(t, r)
			// Writers append while the runner projects.
			st := e.workload(t, workload.Config{Reviews: 400, Writers: 4, Seed: 7, Shadows: []string{"candidate", "rival"}})
			waitCaughtUp(t, e.pool, st.Events)
			for _, p := range all() {
				name := p.name()
				clocktest.Eventually(t, "lag 0", func() bool {
					return gauge(t, r.metrics.lagEvents.WithLabelValues(name)) == 0 && gauge(t, r.metrics.lagSeconds.WithLabelValues(name)) == 0
				})
				// Every review event is applied or ignored, none twice, none
				// missed; the policy snapshots are skipped.
				applied, ignored := counter(t, r.metrics.events.WithLabelValues(name)), counter(t, r.metrics.ignored.WithLabelValues(name))
				if applied+ignored != float64(st.Events-st.Policies) || applied == 0 {
					t.Errorf("%s: events_total %v + ignored_events_total %v, want %d", name, applied, ignored, st.Events-st.Policies)
				}
				if skipped := counter(t, r.metrics.skipped.WithLabelValues(name)); skipped != float64(st.Policies) || st.Policies == 0 {
					t.Errorf("%s: skipped_events_total %v, want the %d policy snapshots", name, skipped, st.Policies)
				}
			}
			stop()
			checkCounts(t, e, st)

			incremental := dump(t, e.pool)
			if _, err := r.Rebuild(context.Background()); err != nil {
				t.Fatal(err)
			}
			diff(t, "full rebuild vs incremental", dump(t, e.pool), incremental)
		})
	}
}

func readBatch(t *testing.T, store eventstore.Store, after eventstore.Position, n int) batch {
	t.Helper()
	recorded, err := store.ReadAll(context.Background(), after, n)
	if err != nil || len(recorded) == 0 {
		t.Fatalf("read: %d events, %v", len(recorded), err)
	}
	events, skipped, err := decode(context.Background(), ledger.NewPolicies(store), recorded)
	if err != nil {
		t.Fatal(err)
	}
	last := recorded[len(recorded)-1]
	return batch{after: after, last: last.Position, events: events, read: len(recorded), skipped: skipped, lastAt: last.RecordedAt}
}

func TestSameBatchTwiceChangesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.workload(t, workload.Config{Reviews: 60, Writers: 2, Seed: 3})
	r := e.runner(t, nil)
	for _, p := range all() {
		if _, err := ensureCheckpoint(ctx, e.pool, p); err != nil {
			t.Fatal(err)
		}
	}
	// apply applies b to every projection in one transaction and checks
	// that each took want of its events (applied or ignored) and was not
	// moved.
	apply := func(what string, b batch, want int) {
		t.Helper()
		out, err := r.applyBatch(ctx, all(), b)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		for i, p := range all() {
			if o := out[i]; o.moved || o.applied+o.ignored != want {
				t.Fatalf("%s: %s: %+v; want %d events taken", what, p.name(), o, want)
			}
		}
	}
	b1 := readBatch(t, e.store, eventstore.Start, 100)
	apply("first apply", b1, len(b1.events))
	once := dump(t, e.pool)
	apply("second apply", b1, 0)
	diff(t, "same batch twice", dump(t, e.pool), once)

	// A batch overlapping the checkpoint applies only what follows it.
	b0 := readBatch(t, e.store, eventstore.Start, 50)
	overlap := readBatch(t, e.store, b0.last, 100) // events 51..150; 51..100 are applied
	apply("overlapping batch", overlap, overlap.read-50)
	// A batch that starts beyond the checkpoint would leave a gap: refused.
	ahead := readBatch(t, e.store, overlap.last, 10)
	ahead.after, ahead.events = ahead.events[0].position, ahead.events[1:]
	out, err := r.applyBatch(ctx, []projection{summaryProjection{}}, ahead)
	if err != nil || !out[0].moved || out[0].stored.position != overlap.last {
		t.Fatalf("batch after a gap: %+v, %v; want moved, the checkpoint at %s", out, err, overlap.last)
	}

	if err := r.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	incremental := dump(t, e.pool)
	if _, err := r.Rebuild(ctx); err != nil {
		t.Fatal(err)
	}
	diff(t, "rebuild", dump(t, e.pool), incremental)
}

func TestKilledMidBatchDoubleCountsNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.runner(t, nil)
	var calls, kills atomic.Int64
	r.beforeCommit = func(ctx context.Context, tx pgx.Tx, names []string) error {
		if calls.Add(1)%5 != 0 {
			return nil
		}
		// The rows are written, the checkpoint not yet: the session dies,
		// as when the process is killed.
		kills.Add(1)
		_, err := tx.Exec(ctx, `SELECT pg_terminate_backend(pg_backend_pid())`)
		if err == nil {
			return errors.New("backend survived")
		}
		return err
	}
	stop := run(t, r)
	st := e.workload(t, workload.Config{Reviews: 300, Writers: 3, Seed: 11})
	waitCaughtUp(t, e.pool, st.Events)
	stop()
	if kills.Load() == 0 {
		t.Fatal("no batch was killed")
	}
	checkCounts(t, e, st)
	incremental := dump(t, e.pool)
	r.beforeCommit = nil
	if _, err := r.Rebuild(context.Background()); err != nil {
		t.Fatal(err)
	}
	diff(t, "rebuild vs runs killed mid-batch", dump(t, e.pool), incremental)
}

func gauge(t *testing.T, g interface{ Write(*dto.Metric) error }) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

func counter(t *testing.T, c interface{ Write(*dto.Metric) error }) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func TestSecondRunnerTakesOver(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, b := e.runner(t, nil), e.runner(t, nil)
	active := func(r *Runner) (n int) {
		for _, p := range all() {
			n += int(gauge(t, r.metrics.active.WithLabelValues(p.name())))
		}
		return n
	}
	stopA := run(t, a)
	clocktest.Eventually(t, "runner a active", func() bool { return active(a) == len(all()) })
	run(t, b)
	st := e.workload(t, workload.Config{Reviews: 100, Writers: 2, Seed: 5})
	waitCaughtUp(t, e.pool, st.Events)
	if active(b) != 0 {
		t.Fatalf("runner b is active while a holds the locks")
	}
	stopA() // the first process goes away
	clocktest.Eventually(t, "runner b active", func() bool { return active(b) == len(all()) })
	more := e.workload(t, workload.Config{Reviews: 100, Prefix: "more-", Writers: 2, Seed: 6})
	waitCaughtUp(t, e.pool, st.Events+more.Events)
}

func TestMetricsRegistered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// Two runners share one registry, as two in one process would.
	reg := prometheus.NewRegistry()
	withReg := func(c *Config) { c.Registerer = reg }
	a, b := e.runner(t, withReg), e.runner(t, withReg)
	e.workload(t, workload.Config{Reviews: 10, Seed: 29})
	if err := a.CatchUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := b.CatchUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range families {
		names[f.GetName()] = true
	}
	for _, want := range []string{"reviewledger_projection_lag_events", "reviewledger_projection_lag_seconds", "reviewledger_projection_events_total", "reviewledger_projection_active"} {
		if !names[want] {
			t.Errorf("registry lacks %s (has %v)", want, names)
		}
	}
}

func TestRebuildWhileRunningAndReading(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	r := e.runner(t, nil)
	run(t, r)

	// Readers query the live tables all along.
	rctx, stopReaders := context.WithCancel(ctx)
	var (
		wg      sync.WaitGroup
		reads   atomic.Int64
		readErr atomic.Value
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for rctx.Err() == nil {
			now := time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC)
			if _, err := e.db.ManualQueue(rctx, QueueQuery{Limit: 50}, now); err != nil && rctx.Err() == nil {
				readErr.Store(err)
			}
			if _, err := e.db.SLO(rctx, 24*time.Hour, "", now); err != nil && rctx.Err() == nil {
				readErr.Store(err)
			}
			reads.Add(1)
		}
	}()

	var st workload.Stats
	done := make(chan struct{})
	go func() {
		defer close(done)
		st = e.workload(t, workload.Config{Reviews: 300, Writers: 3, Seed: 13})
	}()
	for range 2 {
		if _, err := r.Rebuild(ctx); err != nil {
			t.Fatal(err)
		}
	}
	<-done
	waitCaughtUp(t, e.pool, st.Events)
	stopReaders()
	wg.Wait()
	if err, _ := readErr.Load().(error); err != nil {
		t.Fatalf("reader failed during rebuilds: %v", err)
	}
	if reads.Load() == 0 {
		t.Fatal("no reads")
	}
	checkCounts(t, e, st)
	incremental := dump(t, e.pool)
	if _, err := r.Rebuild(ctx); err != nil {
		t.Fatal(err)
	}
	diff(t, "rebuild vs rebuilt while running", dump(t, e.pool), incremental)
}

func TestChangedVersionRebuilds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	st := e.workload(t, workload.Config{Reviews: 50, Seed: 17})
	r := e.runner(t, nil)
	if err := r.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	want := dump(t, e.pool)
	// Rows of an older version of review_summary, wrong ones at that.
	if _, err := e.pool.Exec(ctx, `UPDATE projection_checkpoint SET version = 0 WHERE name = 'review_summary';
		UPDATE review_summary SET state = 'bogus'`); err != nil {
		t.Fatal(err)
	}
	if err := r.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	diff(t, "after the version rebuild", dump(t, e.pool), want)
	if n := count(t, e.pool, `SELECT count(*) FROM projection_checkpoint WHERE name = 'review_summary' AND version = 1 AND rebuilt_at IS NOT NULL AND events = $1`, st.Events); n != 1 {
		t.Fatal("review_summary was not rebuilt to version 1")
	}

	// A newer version than the code's is left alone.
	if _, err := e.pool.Exec(ctx, `UPDATE projection_checkpoint SET version = 99 WHERE name = 'slo'`); err != nil {
		t.Fatal(err)
	}
	if err := r.CatchUp(ctx); !errors.Is(err, errNewerVersion) {
		t.Fatalf("catch up over a newer version: %v, want errNewerVersion", err)
	}
}

func TestStatus(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	now := time.Now()
	r := e.runner(t, func(c *Config) { c.Now = func() time.Time { return now.Add(time.Hour) } })
	st := e.workload(t, workload.Config{Reviews: 20, Seed: 19})
	got, err := r.Status(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range got {
		if s.Exists || s.LagEvents != 10 || !s.LagCapped || s.LagSeconds < 3500 {
			t.Errorf("before running: %+v", s)
		}
	}
	if err := r.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	got, err = r.Status(ctx, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range got {
		if !s.Exists || s.LagEvents != 0 || s.LagCapped || s.LagSeconds != 0 || s.Events != st.Events || s.Version != s.CodeVersion {
			t.Errorf("caught up: %+v", s)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for field, mod := range map[string]func(*Config){
		"Pool":         func(c *Config) { c.Pool = nil },
		"Store":        func(c *Config) { c.Store = nil },
		"BatchSize":    func(c *Config) { c.BatchSize = -1 },
		"PollInterval": func(c *Config) { c.PollInterval = -time.Second },
		"Projections":  func(c *Config) { c.Projections = []string{"nope"} },
	} {
		t.Run(field, func(t *testing.T) {
			cfg := Config{Pool: &pgxpool.Pool{}, Store: nil}
			cfg.Store = eventstoreStub{}
			mod(&cfg)
			_, err := NewRunner(cfg)
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), field) {
				t.Fatalf("got %v, want an error naming %s", err, field)
			}
		})
	}
}

type eventstoreStub struct{ eventstore.Store }

// Locks are held on connections of their own, so a runner with every
// projection, a rebuild and pgstore work on a pool of two connections.
func TestSmallPool(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig(dbtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := pgstore.New(pool, pgstore.Config{PollInterval: 50 * time.Millisecond})
	t.Cleanup(store.Close)
	e := &env{pool: pool, store: store, ledger: ledger.New(store), db: NewDB(pool)}
	r := e.runner(t, nil)
	run(t, r)
	st := e.workload(t, workload.Config{Reviews: 100, Writers: 2, Seed: 23})
	if _, err := r.Rebuild(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitCaughtUp(t, pool, st.Events)
	checkCounts(t, e, st)
}

// Batch boundaries fall anywhere in a review's history: every batch size
// gives the same rows.
func TestBatchSizesAgree(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.workload(t, workload.Config{Reviews: 120, Writers: 2, Seed: 31, Shadows: []string{"candidate"}})
	var want map[string][]string
	for _, size := range []int{5000, 1, 7, 64} {
		r := e.runner(t, func(c *Config) { c.BatchSize = size })
		if _, err := r.Rebuild(ctx); err != nil {
			t.Fatal(err)
		}
		got := dump(t, e.pool)
		if want == nil {
			want = got
			continue
		}
		diff(t, fmt.Sprintf("batches of %d vs 5000", size), got, want)
	}
}

// A runner whose lock sessions die (a network cut, an administrator) lets
// go of its projections, takes the locks again and carries on from the
// checkpoints.
func TestLockLostRejoins(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.runner(t, nil)
	run(t, r)
	st := e.workload(t, workload.Config{Reviews: 60, Writers: 2, Seed: 47})
	waitCaughtUp(t, e.pool, st.Events)
	// Only this test's database: its own lock sessions.
	if n := count(t, e.pool, `SELECT count(pg_terminate_backend(l.pid)) FROM pg_locks l
		JOIN pg_database d ON d.oid = l.database WHERE l.locktype = 'advisory' AND d.datname = current_database()`); n != int64(len(all())) {
		t.Fatalf("terminated %d lock sessions, want %d", n, len(all()))
	}
	clocktest.Eventually(t, "the errors counted", func() bool {
		for _, p := range all() {
			if counter(t, r.metrics.errors.WithLabelValues(p.name())) == 0 {
				return false
			}
		}
		return true
	})
	more := e.workload(t, workload.Config{Reviews: 60, Prefix: "more-", Writers: 2, Seed: 53})
	waitCaughtUp(t, e.pool, st.Events+more.Events)
	checkCounts(t, e, workload.Stats{
		Reviews: st.Reviews + more.Reviews, Events: st.Events + more.Events, Conflicts: st.Conflicts + more.Conflicts,
		States: sumStates(st.States, more.States),
	})
}

func sumStates(a, b map[domain.State]int64) map[domain.State]int64 {
	out := map[domain.State]int64{}
	for _, m := range []map[domain.State]int64{a, b} {
		for k, v := range m {
			out[k] += v
		}
	}
	return out
}

// batches returns how many batches the projection has committed, from the
// batch-time histogram.
func batches(t *testing.T, reg *prometheus.Registry, projection string) uint64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "reviewledger_projection_batch_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == projection {
					return m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return 0
}

// At the head of the ledger, events that come within Settle of a batch
// are applied together in the next one, not one batch each.
func TestSettleGathersEventsAtTheHead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	r := e.runner(t, func(c *Config) { c.Registerer, c.Settle = reg, 2*time.Second })
	run(t, r)
	st := e.workload(t, workload.Config{Reviews: 1, Seed: 41, Prefix: "settle-first-"})
	waitCaughtUp(t, e.pool, st.Events)
	before := batches(t, reg, "review_summary")
	total := st.Events
	for i := range 10 {
		s := e.workload(t, workload.Config{Reviews: 1, Seed: uint64(42 + i), Prefix: fmt.Sprintf("settle-%d-", i)})
		total += s.Events
		time.Sleep(20 * time.Millisecond)
	}
	waitCaughtUp(t, e.pool, total)
	if n := batches(t, reg, "review_summary") - before; n > 3 {
		t.Fatalf("10 bursts 20ms apart took %d batches, want them gathered into at most 3", n)
	}
}

// A review submitted at a time with nanoseconds counts in the same
// latency bucket whether its events are projected in one batch or apart:
// between batches the submission time is read back from slo_open, in
// microseconds, so within a batch it is counted in microseconds too. Its
// finding comes exactly 1,024 ms after the submission, on the bound of a
// bucket, where the 789 ns dropped would move it one bucket up.
func TestLatencyBucketAgreesAcrossBatches(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	class := "caption_suggestion"
	at := time.Date(2026, 1, 1, 0, 0, 0, 789, time.UTC)
	sub, err := domain.Submit(domain.SubmitCommand{ReviewID: "ns-1", ContentClass: class, ContentType: "text/plain",
		PayloadDigest: "sha256:" + strings.Repeat("0", 64), PayloadBytes: 10, Policy: domain.DefaultPolicy().Classes[class],
		SubmittedBy: "test", Now: at})
	if err != nil {
		t.Fatal(err)
	}
	rv, err := e.ledger.Create(ctx, sub, ledger.Actor{Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	start, err := rv.StartAttempt(at)
	if err != nil {
		t.Fatal(err)
	}
	if rv, err = e.ledger.Append(ctx, rv, ledger.Actor{Name: "engine"}, start); err != nil {
		t.Fatal(err)
	}
	evs, err := rv.RecordFinding(domain.Finding{ReviewID: "ns-1", Attempt: start.Attempt, State: domain.DecisionAccepted},
		domain.SourceResponse, at.Add(1024*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.ledger.Append(ctx, rv, ledger.Actor{Name: "engine"}, evs...); err != nil {
		t.Fatal(err)
	}
	var want map[string][]string
	for _, size := range []int{5000, 1} {
		r := e.runner(t, func(c *Config) { c.BatchSize = size })
		if _, err := r.Rebuild(ctx); err != nil {
			t.Fatal(err)
		}
		got := dump(t, e.pool)
		if len(got["slo_latency"]) != 1 {
			t.Fatalf("slo_latency: %v, want one bucket", got["slo_latency"])
		}
		if want == nil {
			want = got
			continue
		}
		diff(t, fmt.Sprintf("batches of %d vs 5000", size), got, want)
	}
}
