package notify

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Outcomes of an attempt, the label of reviewledger_notify_attempts_total.
const (
	outcomeDelivered = "delivered" // answered 2xx
	outcomeRetry     = "retry"     // failed; tried again later
	outcomeGivenUp   = "given_up"  // failed at the end of its retry window
)

type metrics struct {
	active      prometheus.Gauge
	created     prometheus.Counter
	attempts    *prometheus.CounterVec
	duration    prometheus.Histogram
	inFlight    prometheus.Gauge
	pending     prometheus.Gauge
	retrying    prometheus.Gauge
	failed      prometheus.Gauge
	oldest      prometheus.Gauge
	statsFailed prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		active: prometheus.NewGauge(prometheus.GaugeOpts{Name: "reviewledger_notify_active",
			Help: "1 while this process is the active notifier (holds its lock), 0 otherwise."}),
		created: prometheus.NewCounter(prometheus.CounterOpts{Name: "reviewledger_notify_deliveries_created_total",
			Help: "Decision webhooks created from the ledger (one per review reaching manual_review or a final state)."}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "reviewledger_notify_attempts_total",
			Help: "Webhook delivery attempts by outcome: delivered (2xx), retry (failed, tried again later), given_up (failed at the end of its retry window)."},
			[]string{"outcome"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "reviewledger_notify_attempt_duration_seconds",
			Help: "How long webhook delivery attempts took, answered or not.", Buckets: prometheus.ExponentialBuckets(0.005, 2, 13)}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "reviewledger_notify_in_flight",
			Help: "Webhook deliveries being attempted now (at most REVIEWLEDGER_NOTIFY_CONCURRENCY)."}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "reviewledger_notify_pending_deliveries",
			Help: "Webhook deliveries not delivered yet and still tried (measured by the active notifier)."}),
		retrying: prometheus.NewGauge(prometheus.GaugeOpts{Name: "reviewledger_notify_retry_backlog",
			Help: "Webhook deliveries that failed at least once and wait for their next attempt (measured by the active notifier)."}),
		failed: prometheus.NewGauge(prometheus.GaugeOpts{Name: "reviewledger_notify_failed_deliveries",
			Help: "Webhook deliveries given up after their retry window; redeliver them once the receiver is mended (measured by the active notifier)."}),
		oldest: prometheus.NewGauge(prometheus.GaugeOpts{Name: "reviewledger_notify_oldest_undelivered_seconds",
			Help: "Age of the oldest decision whose webhook is not delivered, given up ones included; 0 when none (measured by the active notifier)."}),
		statsFailed: prometheus.NewCounter(prometheus.CounterOpts{Name: "reviewledger_notify_stats_errors_total",
			Help: "Failed measurements of the webhook backlog."}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.active, m.created, m.attempts, m.duration, m.inFlight, m.pending, m.retrying, m.failed, m.oldest, m.statsFailed} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	for _, o := range []string{outcomeDelivered, outcomeRetry, outcomeGivenUp} {
		m.attempts.WithLabelValues(o)
	}
	return m, nil
}
