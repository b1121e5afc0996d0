package projections

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the runner's Prometheus series, labelled by projection.
type metrics struct {
	events     *prometheus.CounterVec
	ignored    *prometheus.CounterVec
	skipped    *prometheus.CounterVec
	errors     *prometheus.CounterVec
	lagEvents  *prometheus.GaugeVec
	lagSeconds *prometheus.GaugeVec
	active     *prometheus.GaugeVec
	batch      *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	label := []string{"projection"}
	m := &metrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reviewledger_projection_events_total",
			Help: "Ledger events applied to the projection's read models: those of a type it uses.",
		}, label),
		ignored: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reviewledger_projection_ignored_events_total",
			Help: "Review events the projection has no use for (e.g. AttemptStarted for the manual queue), passed over without a query; its checkpoint moves over them with the batch.",
		}, label),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reviewledger_projection_skipped_events_total",
			Help: "Events passed over: other streams, or types this version does not project.",
		}, label),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reviewledger_projection_errors_total",
			Help: "Failed batches and lost locks; the runner retries after each.",
		}, label),
		lagEvents: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "reviewledger_projection_lag_events",
			Help: "Events read from the ledger and not yet applied; 0 when caught up. While catching up it counts only what the runner has read ahead, a lower bound.",
		}, label),
		lagSeconds: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "reviewledger_projection_lag_seconds",
			Help: "Age of the oldest event not yet applied; 0 when caught up.",
		}, label),
		active: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "reviewledger_projection_active",
			Help: "1 while this process holds the projection's lock and runs it.",
		}, label),
		batch: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "reviewledger_projection_batch_seconds",
			Help:    "Time to apply one batch and commit it with its checkpoint.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}, label),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	if m.events, err = register(reg, m.events); err != nil {
		return nil, err
	}
	if m.ignored, err = register(reg, m.ignored); err != nil {
		return nil, err
	}
	if m.skipped, err = register(reg, m.skipped); err != nil {
		return nil, err
	}
	if m.errors, err = register(reg, m.errors); err != nil {
		return nil, err
	}
	if m.lagEvents, err = register(reg, m.lagEvents); err != nil {
		return nil, err
	}
	if m.lagSeconds, err = register(reg, m.lagSeconds); err != nil {
		return nil, err
	}
	if m.active, err = register(reg, m.active); err != nil {
		return nil, err
	}
	if m.batch, err = register(reg, m.batch); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c, or returns the collector already registered in its
// place, so that two runners in one process share their series.
func register[T prometheus.Collector](reg prometheus.Registerer, c T) (T, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(T); ok {
			return existing, nil
		}
	}
	return c, fmt.Errorf("register projection metrics: %w", err)
}
