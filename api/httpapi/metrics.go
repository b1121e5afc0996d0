package httpapi

import (
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the server's own Prometheus collectors.
type metrics struct {
	requests  *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	admission prometheus.Counter
	decisions *prometheus.CounterVec
	content   *prometheus.CounterVec
	waiting   prometheus.Gauge
	requeue   prometheus.Counter
	bulk      *prometheus.CounterVec
	streams   prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reviewledger_http_requests_total",
			Help: "HTTP requests answered, by route, method and status code.",
		}, []string{"route", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "reviewledger_http_request_duration_seconds",
			Help:    "Time to answer HTTP requests, by route and method.",
			Buckets: prometheus.DefBuckets,
		}, []string{"route", "method"}),
		admission: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reviewledger_admission_rejected_total",
			Help: "Submissions answered 429 because too many reviews were in flight.",
		}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reviewledger_manual_decisions_total",
			Help: "Manual decisions and four-eyes votes recorded, by outcome.",
		}, []string{"outcome"}),
		content: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reviewledger_content_reads_total",
			Help: "Reads of submitted content (GET /v1/reviews/{id}/content) by moderators and admins, by role and outcome (served, purged, not_found, mismatch).",
		}, []string{"role", "outcome"}),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "reviewledger_http_review_waiters",
			Help: "Requests waiting on GET /v1/reviews/{id}?wait= for their review to leave pending.",
		}),
		requeue: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reviewledger_manual_requeues_total",
			Help: "Reviews moderators sent back to the automated path (one route or in bulk).",
		}),
		bulk: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reviewledger_manual_bulk_items_total",
			Help: "Items of bulk actions on the manual queue, by route and outcome.",
		}, []string{"route", "outcome"}),
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "reviewledger_http_queue_streams",
			Help: "Open GET /v1/manual-queue/events streams.",
		}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.admission, m.decisions, m.content, m.waiting,
		m.requeue, m.bulk, m.streams} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register api metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) observe(route, method string, code int, seconds float64) {
	m.requests.WithLabelValues(route, method, strconv.Itoa(code)).Inc()
	m.duration.WithLabelValues(route, method).Observe(seconds)
}

func (m *metrics) requeues() { m.requeue.Inc() }

func (m *metrics) bulkItems(route string, counts map[string]int) {
	for outcome, n := range counts {
		m.bulk.WithLabelValues(route, outcome).Add(float64(n))
	}
}
