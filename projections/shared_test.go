package projections

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/projections/internal/workload"
)

// transactions returns how many of sql began a transaction, and checks
// that each locked and moved the checkpoints in one statement.
func transactions(t *testing.T, what string, sql []string) int {
	t.Helper()
	var begins int
	for _, q := range sql {
		if strings.HasPrefix(strings.ToLower(q), "begin") {
			begins++
		}
	}
	locks := len(matching(sql, "FROM projection_checkpoint", "FOR UPDATE"))
	moves := len(matching(sql, "UPDATE projection_checkpoint AS c"))
	if locks != begins || moves != begins {
		t.Errorf("%s: %d transactions, %d checkpoint locks, %d checkpoint moves; want one of each per transaction", what, begins, locks, moves)
	}
	return begins
}

func caughtUpTo(t *testing.T, e *env, r *Runner, want int64) {
	t.Helper()
	if err := r.CatchUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM projection_checkpoint WHERE events = $1`, want); n != int64(len(all())) {
		t.Fatalf("%d projections at %d events, want all", n, want)
	}
}

// The three projections share each batch: one transaction per batch
// moves every checkpoint, while catching up and in the steady state.
func TestOneTransactionPerBatch(t *testing.T) {
	t.Parallel()
	e, sql := newTracedEnv(t)
	st := e.workload(t, workload.Config{Reviews: 60, Writers: 2, Seed: 37})
	r := e.runner(t, nil) // batches of 53
	sql.take()
	caughtUpTo(t, e, r, st.Events)
	batches := int((st.Events + 52) / 53)
	if n := transactions(t, "catch-up", sql.take()); n != batches {
		t.Errorf("catch-up of %d events in batches of 53: %d transactions, want %d", st.Events, n, batches)
	}

	// Steady state: events arrive one at a time while Run follows.
	run(t, r)
	s := scenario{t: t, e: e, pol: workload.DefaultPolicy()}
	total := st.Events
	appended := func(what string, events int64) {
		t.Helper()
		total += events
		waitCaughtUp(t, e.pool, total)
		if n := transactions(t, what, sql.take()); n != 1 {
			t.Errorf("%s: %d transactions, want 1 for all three projections", what, n)
		}
	}
	warm := s.submit("warm-up", "caption_suggestion", t0)
	waitCaughtUp(t, e.pool, total+1) // every projection has joined the loop
	total++
	sql.take()
	a := s.submit("a", "caption_suggestion", t0)
	appended("Submitted", 1)
	a = s.attempt(a, t0)
	appended("AttemptStarted", 1)
	s.find(a, domain.DecisionAccepted, t0.Add(3*time.Second))
	appended("FindingReceived", 1)
	s.attempt(warm, t0)
	appended("AttemptStarted of another review", 1)
}

// summaryAhead runs a workload and brings review_summary alone up to date
// with it: the other projections are its laggards.
func summaryAhead(t *testing.T, e *env, cfg workload.Config) workload.Stats {
	t.Helper()
	st := e.workload(t, cfg)
	summaryOnly := e.runner(t, func(c *Config) { c.Projections = []string{ReviewSummary} })
	if err := summaryOnly.CatchUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	return st
}

// A projection behind the others catches up on its own, then joins the
// shared batch.
func TestLaggardJoinsSharedBatch(t *testing.T) {
	t.Parallel()
	e, sql := newTracedEnv(t)
	first := summaryAhead(t, e, workload.Config{Reviews: 80, Writers: 2, Seed: 41})
	more := e.workload(t, workload.Config{Reviews: 40, Prefix: "more-", Writers: 2, Seed: 43})
	r := e.runner(t, nil)
	caughtUpTo(t, e, r, first.Events+more.Events)

	sql.take()
	s := scenario{t: t, e: e, pol: workload.DefaultPolicy()}
	s.submit("after", "transcript_import", t0)
	caughtUpTo(t, e, r, first.Events+more.Events+1)
	if n := transactions(t, "after catching up", sql.take()); n != 1 {
		t.Errorf("a batch after the laggards caught up: %d transactions, want 1", n)
	}

	incremental := dump(t, e.pool)
	if _, err := r.Rebuild(context.Background()); err != nil {
		t.Fatal(err)
	}
	diff(t, "laggards caught up vs rebuild", dump(t, e.pool), incremental)
}

// Events a projection does not use cost it no statement: a batch of only
// an AttemptStarted is review_summary's alone, a conflicting completion is
// the SLO projection's alone (an insert into its minutes and one into
// their hourly rollup, no load), and a finding of a
// review submitted in an earlier batch costs the manual queue one DELETE
// of its candidate and no load.
func TestIgnoredEventsIssueNoQuery(t *testing.T) {
	t.Parallel()
	e, sql := newTracedEnv(t)
	ctx := context.Background()
	r := e.runner(t, nil)
	s := scenario{t: t, e: e, pol: workload.DefaultPolicy()}
	a := s.submit("a", "caption_suggestion", t0) // no human gate
	// The ledger's first event is the class's policy snapshot, in a stream
	// of its own the projections skip; then the review's Submitted.
	caughtUpTo(t, e, r, 1+1)

	touching := func(sql []string, table string) []string { return matching(sql, `"`+table) }
	check := func(what string, got []string, want map[string]int) {
		t.Helper()
		for _, table := range []string{"review_summary", "manual_queue", "slo_"} {
			if n := len(touching(got, table)); n != want[table] {
				t.Errorf("%s: %d statements on %s*, want %d: %q", what, n, table, want[table], touching(got, table))
			}
		}
	}

	sql.take()
	a = s.attempt(a, t0)
	caughtUpTo(t, e, r, 1+2)
	check("AttemptStarted", sql.take(), map[string]int{"review_summary": 2}) // load and write

	late, err := a.RecordConflict(domain.Conflict{Attempt: 1, Source: domain.SourceCallback, Reason: domain.ConflictReviewMovedOn}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.ledger.RecordConflict(ctx, late, ledger.Actor{Name: "provider"}); err != nil {
		t.Fatal(err)
	}
	caughtUpTo(t, e, r, 1+3)
	got := sql.take()
	check("ConflictingCompletionRecorded", got, map[string]int{"slo_": 2})
	if len(touching(got, "slo_conflict\"")) != 1 || len(touching(got, "slo_conflict_hour\"")) != 1 {
		t.Errorf("a conflicting completion: %q, want one statement on slo_conflict and one on slo_conflict_hour", touching(got, "slo_"))
	}

	s.find(a, domain.DecisionAccepted, t0.Add(3*time.Second))
	caughtUpTo(t, e, r, 1+4)
	got = sql.take()
	// slo: the load of slo_open, then its writes in one pgx.Batch: the
	// open row's delete, and the cohort, latency and attempt counters of
	// the minute and of the hour.
	check("FindingReceived", got, map[string]int{"review_summary": 2, "manual_queue": 1, "slo_": 8})
	if q := touching(got, "manual_queue"); len(q) == 1 && !strings.HasPrefix(strings.TrimSpace(q[0]), "DELETE") {
		t.Errorf("the queue on a finding: %q, want a DELETE", q[0])
	}
	if n := count(t, e.pool, `SELECT count(*) FROM manual_queue_candidate`); n != 0 {
		t.Errorf("%d candidates left after the finding, want 0", n)
	}

	for name, want := range map[string][2]float64{
		ReviewSummary: {3, 1}, // applied, ignored (the conflict)
		ManualQueue:   {2, 2}, // Submitted, FindingReceived; AttemptStarted, the conflict
		SLO:           {3, 1}, // Submitted, the conflict, FindingReceived; AttemptStarted
	} {
		got := [2]float64{counter(t, r.metrics.events.WithLabelValues(name)), counter(t, r.metrics.ignored.WithLabelValues(name))}
		if got != want {
			t.Errorf("%s: events applied, ignored = %v, want %v", name, got, want)
		}
	}
	incremental := dump(t, e.pool)
	if _, err := r.Rebuild(ctx); err != nil {
		t.Fatal(err)
	}
	diff(t, "rebuild", dump(t, e.pool), incremental)
}

// growing is a ledger that grows while it is read, as under steady load:
// every read of the global order, once it has been answered, is followed
// by a new review's Submitted, until grow is spent. It counts how often
// each event was read.
type growing struct {
	eventstore.Store
	t    *testing.T
	e    *env
	mu   sync.Mutex
	grow int
	next int
	read map[eventstore.Position]int
}

func (g *growing) ReadAll(ctx context.Context, after eventstore.Position, limit int) ([]eventstore.RecordedEvent, error) {
	events, err := g.Store.ReadAll(ctx, after, limit)
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, ev := range events {
		g.read[ev.Position]++
	}
	if err != nil || g.grow == 0 {
		return events, err
	}
	g.grow--
	g.next++
	sub, serr := domain.Submit(domain.SubmitCommand{ReviewID: fmt.Sprintf("steady-%d", g.next), ContentClass: "caption_suggestion",
		ContentType: "text/plain", PayloadDigest: "sha256:00", Policy: workload.DefaultPolicy().Classes["caption_suggestion"], Now: t0})
	if serr == nil {
		_, serr = g.e.ledger.Create(ctx, sub, ledger.Actor{Name: "test"})
	}
	if serr != nil {
		g.t.Errorf("grow the ledger: %v", serr)
	}
	return events, err
}

// A laggard that reaches the group ahead of it joins that group in the
// same turn of the loop: under steady load the group ahead never reads
// an empty batch, and a laggard left one batch behind it would read every
// event twice, in two transactions, for as long as the load lasts.
func TestLaggardJoinsSharedBatchUnderLoad(t *testing.T) {
	t.Parallel()
	e, sql := newTracedEnv(t)
	first := summaryAhead(t, e, workload.Config{Reviews: 30, Writers: 2, Seed: 47})
	const grow = 25
	g := &growing{Store: e.store, t: t, e: e, grow: grow, read: map[eventstore.Position]int{}}
	// One batch holds the whole catch-up: the laggards reach the summary's
	// checkpoint in the first turn.
	r := e.runner(t, func(c *Config) { c.Store = g; c.BatchSize = 5000 })
	sql.take()
	caughtUpTo(t, e, r, first.Events+grow)

	if g.grow != 0 {
		t.Fatalf("the ledger grew by %d reviews, want %d", grow-g.grow, grow)
	}
	var twice int
	for _, n := range g.read {
		if n > 1 {
			twice++
		}
	}
	if twice > 0 {
		t.Errorf("%d of %d events were read more than once: the laggards chased the summary instead of joining it", twice, len(g.read))
	}
	// The laggards' catch-up, then one transaction per new event for all
	// three projections, and none for the empty read that ends CatchUp.
	if n := transactions(t, "under load", sql.take()); n != 1+grow {
		t.Errorf("%d transactions, want %d: the laggards' catch-up, then one per event for all three", n, 1+grow)
	}
	incremental := dump(t, e.pool)
	if _, err := r.Rebuild(context.Background()); err != nil {
		t.Fatal(err)
	}
	diff(t, "laggards joined under load vs rebuild", dump(t, e.pool), incremental)
}
