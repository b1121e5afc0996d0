package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

type metrics struct {
	submitted            *prometheus.CounterVec
	requeued             *prometheus.CounterVec
	attempts             *prometheus.CounterVec
	budgetExhausted      *prometheus.CounterVec
	conflicts            *prometheus.CounterVec
	escalations          *prometheus.CounterVec
	claimed              *prometheus.CounterVec
	inFlight             prometheus.Gauge
	parked               prometheus.Gauge
	calls                prometheus.Gauge
	finished             prometheus.Counter
	storeErrors          prometheus.Counter
	leasesLost           prometheus.Counter
	retryBudgetExhausted *prometheus.CounterVec
	providerCalls        *prometheus.CounterVec
	shadowCalls          *prometheus.CounterVec
	retryWindowAttempts  *prometheus.GaugeVec
	retryWindowRetries   *prometheus.GaugeVec
	swept                prometheus.Counter
	sweeperActive        prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer, led *ledger.Ledger) (*metrics, error) {
	const ns, sub = "reviewledger", "engine"
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: name, Help: help})
	}
	counters := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: name, Help: help}, labels)
	}
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: name, Help: help})
	}
	gauges := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: name, Help: help}, labels)
	}
	m := &metrics{
		submitted:            counters("reviews_submitted_total", "Reviews created, by content class.", "content_class"),
		requeued:             counters("reviews_requeued_total", "Reviews a moderator sent back to the automated path (a new round), by content class.", "content_class"),
		attempts:             counters("attempts_total", "Provider attempts by outcome (finding, finding_callback, or the failure classification).", "outcome"),
		budgetExhausted:      counters("budget_exhaustions_total", "Reviews escalated because their end-to-end budget ran out, by content class.", "content_class"),
		conflicts:            counters("conflicting_completions_total", "Findings refused because their attempt was no longer in flight, by source (response, callback).", "source"),
		escalations:          counters("escalations_total", "Reviews that left the automated path by escalation, by reason.", "reason"),
		claimed:              counters("claims_total", "Work records this process took, by how it found them (hint, poll, sweep).", "via"),
		inFlight:             gauge("in_flight_reviews", "Reviews being worked by this process now."),
		parked:               gauge("parked_reviews", "Reviews this process parked and will wake (waiting for a backoff, a Retry-After or a callback)."),
		calls:                gauge("provider_calls_in_flight", "Provider calls being made by this process now."),
		finished:             counter("reviews_finished_total", "Reviews whose automated path this process ended (decided, escalated or handed to a moderator)."),
		storeErrors:          counter("store_errors_total", "Failed writes or reads of the ledger or the work records, retried with backoff."),
		leasesLost:           counter("leases_lost_total", "Provider calls stopped because their review's lease could not be renewed in time, or was found taken."),
		providerCalls:        counters("provider_calls_total", "Provider calls made by this process, by provider and outcome (finding, accepted_async, or the failure classification).", "provider", "outcome"),
		shadowCalls:          counters("shadow_calls_total", "Shadow provider calls, by provider and outcome (finding, timeout, error, or skipped when its shadow slots were all taken).", "provider", "outcome"),
		retryBudgetExhausted: counters("retry_budget_exhausted_total", "Retries refused because the provider's retry budget was spent.", "provider"),
		retryWindowAttempts:  gauges("retry_budget_window_attempts", "Attempts in the retry budget's sliding window.", "provider"),
		retryWindowRetries:   gauges("retry_budget_window_retries", "Retries in the retry budget's sliding window.", "provider"),
		swept:                counter("swept_reviews_total", "Reviews escalated by the deadline sweeper."),
		sweeperActive:        gauge("sweeper_active", "1 while this process is the elected deadline sweeper and content purger, 0 otherwise."),
	}
	if reg == nil {
		return m, nil
	}
	collectors := append([]prometheus.Collector{m.submitted, m.requeued, m.attempts, m.budgetExhausted, m.conflicts, m.escalations, m.claimed,
		m.inFlight, m.parked, m.calls, m.finished, m.storeErrors, m.leasesLost, m.retryBudgetExhausted, m.providerCalls, m.shadowCalls,
		m.retryWindowAttempts, m.retryWindowRetries, m.swept, m.sweeperActive}, groupCommitMetrics(led)...)
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				continue
			}
			return nil, fmt.Errorf("engine: register metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) observeBudget(b *retryBudget, now time.Time, name string) {
	attempts, retries := b.snapshot(now)
	m.retryWindowAttempts.WithLabelValues(name).Set(float64(attempts))
	m.retryWindowRetries.WithLabelValues(name).Set(float64(retries))
}

// groupCommitMetrics are the ledger's group commits in this process, read
// from its Stats when scraped.
func groupCommitMetrics(led *ledger.Ledger) []prometheus.Collector {
	const ns, sub = "reviewledger", "ledger"
	stat := func(f func(ledger.Stats) float64) func() float64 { return func() float64 { return f(led.Stats()) } }
	counter := func(name, help string, f func(ledger.Stats) float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: name, Help: help}, stat(f))
	}
	gauge := func(name, help string, f func(ledger.Stats) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: name, Help: help}, stat(f))
	}
	return []prometheus.Collector{
		counter("group_commits_total", "Group commits written (or failed) by this process.", func(s ledger.Stats) float64 { return float64(s.Batches) }),
		counter("group_commit_appends_total", "Stream appends in them.", func(s ledger.Stats) float64 { return float64(s.Appends) }),
		counter("group_commit_failures_total", "Group commits whose write failed as a whole.", func(s ledger.Stats) float64 { return float64(s.Failures) }),
		counter("group_commit_seconds_total", "Time spent writing group commits.", func(s ledger.Stats) float64 { return s.Seconds }),
		gauge("group_commit_waiting_appends", "Appends waiting for a group commit now.", func(s ledger.Stats) float64 { return float64(s.Waiting) }),
		gauge("group_commit_writing_seconds", "How long the oldest group commit being written now has been (0: none); with one at a time, every append of the process waits behind it.",
			func(s ledger.Stats) float64 { return s.Writing.Seconds() }),
	}
}
