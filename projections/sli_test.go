package projections

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/projections/internal/workload"
)

// knownOutcomes writes a workload whose SLIs are known: per call, for
// reviews prefixed p,
//
//	caption_suggestion: 3 accepted in 2 s; 1 rejected after a timeout
//	  and a transport error (4 s in all); 1 escalated before its
//	  deadline (attempts exhausted at 25 s); 1 escalated at its
//	  deadline by the sweeper (31 s, past the 30 s budget); escalations
//	  are never within budget
//	publishing_rule: 1 accepted in 3 s (human gate: then to the queue);
//	  1 failed closed (attempts exhausted at 12 s)
//	1 conflicting completion, on one of the accepted caption reviews
//
// and returns the reviews left in the manual queue per class.
func knownOutcomes(t *testing.T, e *env, p string, at time.Time) map[string]int {
	t.Helper()
	s := scenario{t: t, e: e, pol: workload.DefaultPolicy()}
	sec := func(n float64) time.Time { return at.Add(time.Duration(n * float64(time.Second))) }
	var accepted *ledger.Snapshot
	for i := range 3 {
		rv := s.attempt(s.submit(fmt.Sprintf("%s-acc-%d", p, i), "caption_suggestion", sec(0)), sec(0))
		accepted = s.find(rv, domain.DecisionAccepted, sec(2))
	}
	rv := s.attempt(s.submit(p+"-rej", "caption_suggestion", sec(0)), sec(0))
	rv = s.timeout(rv, domain.ClassDeadlineExceeded, sec(1))
	rv = s.attempt(rv, sec(1.5))
	rv = s.timeout(rv, domain.ClassTransportError, sec(2))
	rv = s.attempt(rv, sec(2.5))
	s.find(rv, domain.DecisionRejected, sec(4))

	rv = s.attempt(s.submit(p+"-exh", "caption_suggestion", sec(0)), sec(0))
	rv = s.timeout(rv, domain.ClassDeadlineExceeded, sec(10))
	s.add(rv)(one(rv.Escalate(domain.ReasonAttemptsExhausted, "", sec(25))))

	rv = s.attempt(s.submit(p+"-late", "caption_suggestion", sec(0)), sec(0))
	s.add(rv)(one(rv.Escalate(domain.ReasonDeadlinePassed, "", sec(31))))

	rv = s.attempt(s.submit(p+"-gate", "publishing_rule", sec(0)), sec(0))
	s.find(rv, domain.DecisionAccepted, sec(3))

	rv = s.attempt(s.submit(p+"-closed", "publishing_rule", sec(0)), sec(0))
	rv = s.timeout(rv, domain.ClassRateLimited, sec(2))
	s.add(rv)(one(rv.Escalate(domain.ReasonAttemptsExhausted, "", sec(12))))

	c, err := accepted.RecordConflict(domain.Conflict{Attempt: 1, Source: domain.SourceCallback, Reason: domain.ConflictReviewMovedOn}, sec(5))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.ledger.RecordConflict(context.Background(), c, ledger.Actor{Name: "provider"}); err != nil {
		t.Fatal(err)
	}
	return map[string]int{"caption_suggestion": 2, "publishing_rule": 1}
}

// wantOutcomes are knownOutcomes' series, times n calls.
func wantOutcomes(n int) map[string]float64 {
	m := map[string]float64{
		"caption_suggestion/accepted/true":    3,
		"caption_suggestion/rejected/true":    1,
		"caption_suggestion/escalated/false":  2,
		"publishing_rule/accepted/true":       1,
		"publishing_rule/failed_closed/false": 1,
	}
	for k := range m {
		m[k] *= float64(n)
	}
	return m
}

// TestSLICountedOncePerReview runs two runners on one database, as two
// processes would, and checks that the SLIs both export add up to each
// review and attempt exactly once: while the first runs the SLO
// projection, when it stops and the second takes over, and across a
// rebuild (which counts nothing again).
func TestSLICountedOncePerReview(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	classes := workload.DefaultPolicy().Names()
	type proc struct {
		reg    *prometheus.Registry
		r      *Runner
		cancel context.CancelFunc
		done   chan struct{}
	}
	start := func() *proc {
		p := &proc{reg: prometheus.NewRegistry(), done: make(chan struct{})}
		p.r = e.runner(t, func(c *Config) { c.Registerer, c.Classes = p.reg, classes })
		ctx, cancel := context.WithCancel(context.Background())
		p.cancel = cancel
		go func() {
			defer close(p.done)
			_ = p.r.Run(ctx)
		}()
		t.Cleanup(func() { cancel(); <-p.done })
		return p
	}
	procs := []*proc{start(), start()}
	sum := func() map[string]float64 {
		total := map[string]float64{}
		for _, p := range procs {
			for k, v := range gauges(t, p.reg, MetricOutcomes, "content_class", "outcome", "within_budget") {
				total[k] += v
			}
		}
		return total
	}
	active := func() *proc {
		t.Helper()
		var found *proc
		clocktest.Eventually(t, "a runner to hold the SLO projection", func() bool {
			for _, p := range procs {
				if gauges(t, p.reg, "reviewledger_projection_active", "projection")["slo"] == 1 {
					found = p
					return true
				}
			}
			return false
		})
		return found
	}
	caughtUp := func() {
		t.Helper()
		clocktest.Eventually(t, "the projections to catch up", func() bool {
			st, err := procs[0].r.Status(context.Background(), 1)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range st {
				if s.LagEvents != 0 || !s.Exists {
					return false
				}
			}
			return true
		})
	}

	first := active()
	queued := knownOutcomes(t, e, "one", t0)
	caughtUp()
	eventuallySeries(t, "first runner, first workload", sum, wantOutcomes(1))
	equalSeries(t, "queue depth exported by the active runner", gauges(t, first.reg, MetricQueueDepth, "content_class"),
		map[string]float64{"caption_suggestion": float64(queued["caption_suggestion"]), "publishing_rule": float64(queued["publishing_rule"]), "transcript_import": 0})

	// The first process stops; the other takes over and counts only what
	// follows.
	first.cancel()
	<-first.done
	second := active()
	if second == first {
		t.Fatal("the stopped runner still holds the SLO projection")
	}
	knownOutcomes(t, e, "two", t0.Add(time.Hour))
	caughtUp()
	eventuallySeries(t, "both runners, two workloads", sum, wantOutcomes(2))
	equalSeries(t, "second runner alone", nonZero(gauges(t, second.reg, MetricOutcomes, "content_class", "outcome", "within_budget")), wantOutcomes(1))
	if got := gauges(t, first.reg, MetricQueueDepth, "content_class"); len(got) != 0 {
		t.Errorf("the runner that let the projection go still exports the queue: %v", got)
	}
	equalSeries(t, "queue depth after the takeover", gauges(t, second.reg, MetricQueueDepth, "content_class"),
		map[string]float64{"caption_suggestion": 4, "publishing_rule": 2, "transcript_import": 0})

	// Histograms: one outcome duration per review, one attempt duration
	// per attempt that ended.
	over := func(collect func(*prometheus.Registry) map[string]float64) func() map[string]float64 {
		return func() map[string]float64 {
			total := map[string]float64{}
			for _, p := range procs {
				for k, v := range collect(p.reg) {
					total[k] += v
				}
			}
			return nonZero(total)
		}
	}
	eventuallySeries(t, "outcome durations", over(func(r *prometheus.Registry) map[string]float64 {
		return histogramCounts(t, r, MetricOutcomeDuration, "content_class")
	}), map[string]float64{"caption_suggestion": 12, "publishing_rule": 4})
	eventuallySeries(t, "attempt durations", over(func(r *prometheus.Registry) map[string]float64 {
		return histogramCounts(t, r, MetricAttemptDuration, "content_class", "outcome")
	}), map[string]float64{
		"caption_suggestion/finding": 8, "caption_suggestion/timeout": 4, "caption_suggestion/failure": 2,
		"publishing_rule/finding": 2, "publishing_rule/failure": 2,
	})
	eventuallySeries(t, "conflicting completions", over(func(r *prometheus.Registry) map[string]float64 {
		return gauges(t, r, MetricConflicts, "content_class")
	}), map[string]float64{"caption_suggestion": 2})

	// A rebuild recomputes the tables and counts nothing again.
	if _, err := second.r.Rebuild(context.Background(), SLO); err != nil {
		t.Fatal(err)
	}
	knownOutcomes(t, e, "three", t0.Add(2*time.Hour))
	caughtUp()
	eventuallySeries(t, "after a rebuild and a third workload", sum, wantOutcomes(3))
}

// TestSLIBuckets checks the durations land in the right buckets: the
// outcome of a review accepted in 2 s is at most 2.5 s, and one escalated
// at its 31 s deadline is above 30 s.
func TestSLIBuckets(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	knownOutcomes(t, e, "b", t0)
	if err := e.runner(t, func(c *Config) { c.Registerer = reg }).CatchUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	h := histogramOf(t, reg, MetricOutcomeDuration, map[string]string{"content_class": "caption_suggestion"})
	if h.GetSampleCount() != 6 {
		t.Fatalf("caption outcomes %d, want 6", h.GetSampleCount())
	}
	if got, want := h.GetSampleSum(), 3*2.0+4+25+31; got != want {
		t.Errorf("sum of caption outcome durations %v s, want %v", got, want)
	}
	for _, b := range h.GetBucket() {
		var want uint64
		switch le := b.GetUpperBound(); {
		case le < 2:
		case le < 4:
			want = 3
		case le < 25:
			want = 4
		case le < 31:
			want = 5
		default:
			want = 6
		}
		if b.GetCumulativeCount() != want {
			t.Errorf("bucket le=%v: %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
		}
	}
}

// gauges returns the value of every series of the counter or gauge name,
// keyed by the given labels' values joined with "/".
func gauges(t *testing.T, reg *prometheus.Registry, name string, labels ...string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, m := range family(t, reg, name) {
		v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
		out[labelKey(m, labels)] += v
	}
	return out
}

func histogramCounts(t *testing.T, reg *prometheus.Registry, name string, labels ...string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, m := range family(t, reg, name) {
		out[labelKey(m, labels)] += float64(m.GetHistogram().GetSampleCount())
	}
	return out
}

func histogramOf(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) *dto.Histogram {
	t.Helper()
	for _, m := range family(t, reg, name) {
		ok := true
		for _, l := range m.GetLabel() {
			if v, named := want[l.GetName()]; named && v != l.GetValue() {
				ok = false
			}
		}
		if ok {
			return m.GetHistogram()
		}
	}
	t.Fatalf("no %s series with %v", name, want)
	return nil
}

func family(t *testing.T, reg *prometheus.Registry, name string) []*dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()
		}
	}
	return nil
}

func labelKey(m *dto.Metric, labels []string) string {
	vals := make([]string, len(labels))
	for i, name := range labels {
		for _, l := range m.GetLabel() {
			if l.GetName() == name {
				vals[i] = l.GetValue()
			}
		}
	}
	return strings.Join(vals, "/")
}

func nonZero(m map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		if v != 0 {
			out[k] = v
		}
	}
	return out
}

// eventuallySeries waits until got() equals want: a runner publishes a
// batch's observations just after its checkpoint commits, so a reader may
// see the checkpoint first. On timeout it reports the difference; a count
// above want (a review counted twice) never comes back down, so it fails.
func eventuallySeries(t *testing.T, what string, got func() map[string]float64, want map[string]float64) {
	t.Helper()
	clocktest.EventuallyShows(t, what, func() (bool, string) {
		diffs := seriesDiff(got(), want)
		return len(diffs) == 0, "\n  " + strings.Join(diffs, "\n  ")
	})
}

// equalSeries compares series, ignoring those at zero in got that want
// does not name.
func equalSeries(t *testing.T, what string, got, want map[string]float64) {
	t.Helper()
	if diffs := seriesDiff(got, want); len(diffs) > 0 {
		t.Errorf("%s:\n  %s", what, strings.Join(diffs, "\n  "))
	}
}

// seriesDiff lists, sorted, where got differs from want, ignoring the
// series at zero in got that want does not name.
func seriesDiff(got, want map[string]float64) []string {
	var diffs []string
	for k, v := range want {
		if got[k] != v {
			diffs = append(diffs, fmt.Sprintf("%s: %v, want %v", k, got[k], v))
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok && v != 0 {
			diffs = append(diffs, fmt.Sprintf("%s: %v, want none", k, v))
		}
	}
	sort.Strings(diffs)
	return diffs
}
