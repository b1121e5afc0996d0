package runner

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	submitted            *prometheus.CounterVec
	attempts             *prometheus.CounterVec
	budgetExhausted      *prometheus.CounterVec
	conflicts            *prometheus.CounterVec
	escalations          *prometheus.CounterVec
	inFlight             prometheus.Gauge
	retryBudgetExhausted *prometheus.CounterVec
	retryWindowAttempts  *prometheus.GaugeVec
	retryWindowRetries   *prometheus.GaugeVec
	swept                prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	const ns, sub = "reviewledger", "runner"
	m := &metrics{
		submitted: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "reviews_submitted_total", Help: "Reviews created, by content class."}, []string{"content_class"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "attempts_total", Help: "Provider attempts by outcome (finding or the failure classification)."}, []string{"outcome"}),
		budgetExhausted: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "budget_exhaustions_total", Help: "Reviews escalated because their end-to-end budget ran out, by content class."}, []string{"content_class"}),
		conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "conflicting_completions_total", Help: "Findings refused because their attempt was no longer in flight, by source (response, callback)."}, []string{"source"}),
		escalations: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "escalations_total", Help: "Reviews that left the automated path by escalation, by reason."}, []string{"reason"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "in_flight_reviews", Help: "Reviews being worked now."}),
		retryBudgetExhausted: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "retry_budget_exhausted_total", Help: "Retries refused because the provider's retry budget was spent."}, []string{"provider"}),
		retryWindowAttempts: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "retry_budget_window_attempts", Help: "Attempts in the retry budget's sliding window."}, []string{"provider"}),
		retryWindowRetries: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "retry_budget_window_retries", Help: "Retries in the retry budget's sliding window."}, []string{"provider"}),
		swept: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "swept_reviews_total", Help: "Reviews escalated by the deadline sweeper."}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.submitted, m.attempts, m.budgetExhausted, m.conflicts, m.escalations,
		m.inFlight, m.retryBudgetExhausted, m.retryWindowAttempts, m.retryWindowRetries, m.swept} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				continue
			}
			return nil, fmt.Errorf("runner: register metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) observeBudget(b *retryBudget, now time.Time, name string) {
	attempts, retries := b.snapshot(now)
	m.retryWindowAttempts.WithLabelValues(name).Set(float64(attempts))
	m.retryWindowRetries.WithLabelValues(name).Set(float64(retries))
}
