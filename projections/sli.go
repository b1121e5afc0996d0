package projections

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// The service-level indicators in Prometheus form. They are derived from
// the ledger by the SLO projection, so each review counts once however many
// processes run: one process at a time holds the projection's lock, and a
// batch's observations are published only once its transaction (which
// moves the checkpoint) has committed. A rebuild publishes nothing: it
// recomputes tables, it does not witness new events. The process that
// holds the lock also exports the manual queue's depth and oldest age.
//
// A process that loses the lock keeps the counts it published, frozen,
// and the process taking over counts on from zero: sum the series over
// processes and take rate() or increase(), which see a frozen series as
// no increase and a new one as starting there.

// Review outcomes: how a review first left pending. A finding counts as
// accepted or rejected (a human gate's manual_review follows it), an
// escalation as escalated (to the manual queue) or failed_closed (rejected
// by policy). The list is fixed: label values stay bounded.
//
// within_budget is "true" for a complete finding at or before the
// review's deadline, what the objective asks for, and "false" for
// anything else: a finding after the deadline and every escalation. So
// the error ratio is one selector over another:
// rate(...{within_budget="false"}) / rate(...). A review escalated and
// then decided by a moderator within its budget counts as completed in
// the read models (GET /v1/slo) but as a miss here, where it counts when
// it leaves pending, the moment an alert needs it.
const (
	OutcomeAccepted     = "accepted"
	OutcomeRejected     = "rejected"
	OutcomeEscalated    = "escalated"
	OutcomeFailedClosed = "failed_closed"
)

// Outcomes lists every review outcome.
var Outcomes = []string{OutcomeAccepted, OutcomeRejected, OutcomeEscalated, OutcomeFailedClosed}

// AttemptOutcomes lists the outcomes of an attempt: a finding, a timeout
// (deadline_exceeded) or another failure.
var AttemptOutcomes = []string{outcomeFinding, outcomeTimeout, outcomeFailure}

// SLI metric names, for alert rules and dashboards.
const (
	MetricOutcomes        = "reviewledger_review_outcomes_total"
	MetricOutcomeDuration = "reviewledger_review_outcome_duration_seconds"
	MetricAttemptDuration = "reviewledger_review_attempt_duration_seconds"
	MetricConflicts       = "reviewledger_review_conflicting_completions_total"
	MetricQueueDepth      = "reviewledger_manual_queue_reviews"
	MetricQueueOldest     = "reviewledger_manual_queue_oldest_age_seconds"
)

// Histogram buckets, in seconds: budgets are seconds to minutes, attempts
// milliseconds to tens of seconds.
var (
	outcomeBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 20, 30, 45, 60, 90, 120, 300, 600}
	attemptBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60}
)

// sliMetrics are the SLIs a runner publishes.
type sliMetrics struct {
	outcomes        *prometheus.CounterVec
	outcomeDuration *prometheus.HistogramVec
	attemptDuration *prometheus.HistogramVec
	conflicts       *prometheus.CounterVec
	queue           *queueCollector
}

func newSLIMetrics(reg prometheus.Registerer, pool *pgxpool.Pool) (*sliMetrics, error) {
	class := "content_class"
	m := &sliMetrics{
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricOutcomes,
			Help: "Reviews that left pending, by content class, outcome (accepted, rejected: a complete finding; escalated, failed_closed) and within_budget (true: a complete finding by the deadline, as the objective asks; false: anything else); each review once, from the ledger.",
		}, []string{class, "outcome", "within_budget"}),
		outcomeDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    MetricOutcomeDuration,
			Help:    "Time from submission to the review's outcome (its first finding or escalation), by content class; each review once, from the ledger.",
			Buckets: outcomeBuckets,
		}, []string{class}),
		attemptDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    MetricAttemptDuration,
			Help:    "Provider attempt durations by content class and outcome (finding, timeout, failure); each attempt once, from the ledger.",
			Buckets: attemptBuckets,
		}, []string{class, "outcome"}),
		conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricConflicts,
			Help: "Late or duplicate completions refused, by content class; each once, from the ledger's conflict streams.",
		}, []string{class}),
		queue: newQueueCollector(pool),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	if m.outcomes, err = register(reg, m.outcomes); err != nil {
		return nil, err
	}
	if m.outcomeDuration, err = register(reg, m.outcomeDuration); err != nil {
		return nil, err
	}
	if m.attemptDuration, err = register(reg, m.attemptDuration); err != nil {
		return nil, err
	}
	if m.conflicts, err = register(reg, m.conflicts); err != nil {
		return nil, err
	}
	if m.queue, err = register(reg, m.queue); err != nil {
		return nil, err
	}
	return m, nil
}

// start is called when this process takes the SLO projection's lock: the
// series of every class of the policy are made (at zero, so that a ratio
// of rates has a denominator from the first review on), and the queue
// gauges are exported.
func (m *sliMetrics) start(classes []string) {
	for _, c := range classes {
		for _, o := range Outcomes {
			m.outcomes.WithLabelValues(c, o, "false")
		}
		m.outcomes.WithLabelValues(c, OutcomeAccepted, "true")
		m.outcomes.WithLabelValues(c, OutcomeRejected, "true")
		m.outcomeDuration.WithLabelValues(c)
		for _, o := range AttemptOutcomes {
			m.attemptDuration.WithLabelValues(c, o)
		}
		m.conflicts.WithLabelValues(c)
	}
	m.queue.activate(classes)
}

// stop is called when the lock is let go: the queue gauges are no longer
// this process's to export.
func (m *sliMetrics) stop() { m.queue.deactivate() }

// publish adds a committed batch's observations.
func (m *sliMetrics) publish(o *sliBatch) {
	for k, n := range o.outcomes {
		m.outcomes.WithLabelValues(k.class, k.outcome, strconv.FormatBool(k.within)).Add(float64(n))
	}
	for _, x := range o.outcomeDurations {
		m.outcomeDuration.WithLabelValues(x.class).Observe(x.seconds)
	}
	for _, x := range o.attemptDurations {
		m.attemptDuration.WithLabelValues(x.class, x.outcome).Observe(x.seconds)
	}
	for class, n := range o.conflicts {
		m.conflicts.WithLabelValues(class).Add(float64(n))
	}
}

// sliBatch collects what one batch of the SLO projection observed, to be
// published once the batch commits.
type sliBatch struct {
	outcomes         map[outcomeKey]int64
	outcomeDurations []observation
	attemptDurations []observation
	conflicts        map[string]int64
}

type outcomeKey struct {
	class, outcome string
	within         bool
}

type observation struct {
	class, outcome string
	seconds        float64
}

func newSLIBatch() *sliBatch {
	return &sliBatch{outcomes: map[outcomeKey]int64{}, conflicts: map[string]int64{}}
}

func (o *sliBatch) outcome(class, outcome string, submittedAt, deadline, at time.Time) {
	if o == nil {
		return
	}
	finding := outcome == OutcomeAccepted || outcome == OutcomeRejected
	o.outcomes[outcomeKey{class, outcome, finding && !at.After(deadline)}]++
	o.outcomeDurations = append(o.outcomeDurations, observation{class: class, seconds: max(0, at.Sub(submittedAt).Seconds())})
}

func (o *sliBatch) attempt(class, outcome string, elapsedMS int64) {
	if o == nil {
		return
	}
	o.attemptDurations = append(o.attemptDurations, observation{class: class, outcome: outcome, seconds: float64(max(0, elapsedMS)) / 1000})
}

func (o *sliBatch) conflict(class string) {
	if o != nil {
		o.conflicts[class]++
	}
}

type sliKey struct{}

// withSLI returns ctx carrying o, which the SLO projection's apply fills.
func withSLI(ctx context.Context, o *sliBatch) context.Context {
	return context.WithValue(ctx, sliKey{}, o)
}

// sliFrom returns the collector ctx carries; nil (collect nothing) when
// none, as in a rebuild.
func sliFrom(ctx context.Context) *sliBatch {
	o, _ := ctx.Value(sliKey{}).(*sliBatch)
	return o
}

// queueCollector exports the manual queue's depth and oldest age per
// class, read from the manual_queue table at each scrape, while this
// process holds the SLO projection's lock.
type queueCollector struct {
	pool          *pgxpool.Pool
	depth, oldest *prometheus.Desc
	active        atomic.Bool
	mu            sync.Mutex
	classes       []string
	now           func() time.Time
}

func newQueueCollector(pool *pgxpool.Pool) *queueCollector {
	return &queueCollector{
		pool:   pool,
		depth:  prometheus.NewDesc(MetricQueueDepth, "Reviews waiting in the manual queue, by content class; exported by the process running the SLO projection.", []string{"content_class"}, nil),
		oldest: prometheus.NewDesc(MetricQueueOldest, "Age of the oldest review in the manual queue, by content class (0 when empty); exported by the process running the SLO projection.", []string{"content_class"}, nil),
		now:    time.Now,
	}
}

func (c *queueCollector) activate(classes []string) {
	c.mu.Lock()
	c.classes = slices.Clone(classes)
	c.mu.Unlock()
	c.active.Store(true)
}

func (c *queueCollector) deactivate() { c.active.Store(false) }

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.depth
	ch <- c.oldest
}

// queueScrapeTimeout bounds the query of one scrape.
const queueScrapeTimeout = 2 * time.Second

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	if !c.active.Load() || c.pool == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), queueScrapeTimeout)
	defer cancel()
	stats, err := queueByClass(ctx, c.pool)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.depth, fmt.Errorf("read manual queue: %w", err))
		return
	}
	c.mu.Lock()
	classes := slices.Clone(c.classes)
	c.mu.Unlock()
	for class := range stats {
		if !slices.Contains(classes, class) {
			classes = append(classes, class) // a class since taken out of the policy, still queued
		}
	}
	now := c.now()
	for _, class := range classes {
		st := stats[class]
		age := 0.0
		if st.depth > 0 {
			age = max(0, now.Sub(st.oldest).Seconds())
		}
		ch <- prometheus.MustNewConstMetric(c.depth, prometheus.GaugeValue, float64(st.depth), class)
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, age, class)
	}
}

type classQueue struct {
	depth  int64
	oldest time.Time
}

func queueByClass(ctx context.Context, pool *pgxpool.Pool) (map[string]classQueue, error) {
	rows, err := pool.Query(ctx, `SELECT content_class, count(*), min(escalated_at) FROM manual_queue GROUP BY content_class`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]classQueue{}
	for rows.Next() {
		var (
			class string
			q     classQueue
		)
		if err := rows.Scan(&class, &q.depth, &q.oldest); err != nil {
			return nil, err
		}
		out[class] = q
	}
	return out, rows.Err()
}
