package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	collectortracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
)

// scrape reads a serve process's /metrics, checks it with `promtool check
// metrics` (Prometheus's naming and format lint) and returns the families.
func scrape(t *testing.T, p *serveProc) map[string]*dto.MetricFamily {
	t.Helper()
	res, err := http.Get(p.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", res.StatusCode, err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return families
}

// checkMetrics runs `promtool check metrics` on a process's /metrics.
func checkMetrics(t *testing.T, p *serveProc) {
	t.Helper()
	tool := promtool(t)
	res, err := http.Get(p.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	cmd := exec.Command(tool, "check", "metrics")
	cmd.Stdin = res.Body
	if out, err := cmd.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "" {
		t.Errorf("promtool check metrics on %s/metrics: %v\n%s", p.URL, err, out)
	}
}

// sumSeries adds up the series of family name whose labels include want,
// over every process: counters and gauges by value, histograms by count.
func sumSeries(fams []map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	var total float64
	for _, f := range fams {
		mf := f[name]
		if mf == nil {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if have[k] != v {
					continue series
				}
			}
			total += m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	return total
}

// otlpReceiver is an in-process OTLP/HTTP trace receiver: what an
// OpenTelemetry collector's otlp receiver is to a deployment.
type otlpReceiver struct {
	srv *httptest.Server

	mu        sync.Mutex
	spans     []*tracepb.Span
	resources []*resourcepb.Resource
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		var in collectortracepb.ExportTraceServiceRequest
		if req.URL.Path != "/v1/traces" || err != nil || proto.Unmarshal(body, &in) != nil {
			http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range in.GetResourceSpans() {
			r.resources = append(r.resources, rs.GetResource())
			for _, ss := range rs.GetScopeSpans() {
				r.spans = append(r.spans, ss.GetSpans()...)
			}
		}
		r.mu.Unlock()
		out, _ := proto.Marshal(&collectortracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *otlpReceiver) received() ([]*tracepb.Span, []*resourcepb.Resource) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.spans), slices.Clone(r.resources)
}

// TestE2ETraces: with OTEL_EXPORTER_OTLP_ENDPOINT set, serve exports one
// trace per review to the collector: a review submitted with a W3C
// traceparent whose first attempt times out and whose second is accepted
// is, in the submitter's trace, its submission, both provider calls (each
// sent its span's traceparent), the backoff between them and the
// finding's conditional commit; no attribute holds the content.
func TestE2ETraces(t *testing.T) {
	t.Parallel()
	collector := newOTLPReceiver(t)
	srv := newE2EServer(t, map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": collector.srv.URL,
		"OTEL_SERVICE_NAME":           "reviewledger-e2e",
		"OTEL_BSP_SCHEDULE_DELAY":     "100",
	})
	const (
		id      = "e2e-trace-0001"
		traceID = "5b8efff798038103d269b633813fc60c"
		parent  = "00-" + traceID + "-eee19b7ec3c1b174-01"
	)
	srv.Provider.script(id, hang(), accept())
	raw, _ := json.Marshal(submitBody(id, "e2e_fast", content("traced")))
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/reviews", bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tokSubmitter)
	req.Header.Set("traceparent", parent)
	res, err := e2eClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusAccepted {
		t.Fatalf("submit: %d", res.StatusCode)
	}
	if got := srv.waitSettled(t, id); got.State != "accepted" || got.Attempts != 2 {
		t.Fatalf("review %+v, want accepted after two attempts", got)
	}
	want := []string{"review.attempt", "review.attempt", "review.backoff", "review.commit_finding", "review.submit"}
	var spans []*tracepb.Span
	clocktest.EventuallyShows(t, "the review's spans at the collector", func() (bool, string) {
		all, _ := collector.received()
		spans = nil
		var names []string
		for _, s := range all {
			if hex.EncodeToString(s.GetTraceId()) == traceID {
				spans = append(spans, s)
				names = append(names, s.GetName())
			}
		}
		slices.Sort(names)
		return slices.Equal(names, want), fmt.Sprintf("spans in the trace: %v", names)
	})
	attemptSpans := map[string]string{} // attempt number → span ID
	for _, s := range spans {
		attrs := map[string]string{}
		for _, kv := range s.GetAttributes() {
			v := kv.GetValue()
			text := v.GetStringValue()
			if text == "" {
				text = fmt.Sprint(v.GetIntValue())
			}
			attrs[kv.GetKey()] = text
			if strings.Contains(v.String(), contentMarker) {
				t.Errorf("span %s: attribute %s holds the content", s.GetName(), kv.GetKey())
			}
		}
		if s.GetName() == "review.submit" && hex.EncodeToString(s.GetParentSpanId()) != "eee19b7ec3c1b174" {
			t.Errorf("submit span's parent %x, want the submitter's", s.GetParentSpanId())
		}
		if s.GetName() == "review.attempt" {
			attemptSpans[attrs["reviewledger.attempt"]] = hex.EncodeToString(s.GetSpanId())
			if attrs["reviewledger.attempt"] == "1" && attrs["reviewledger.classification"] != "deadline_exceeded" {
				t.Errorf("first attempt: %v", attrs)
			}
		}
	}
	for _, call := range srv.Provider.seen(id) {
		if want := "00-" + traceID + "-" + attemptSpans[call.Attempt] + "-01"; call.Traceparent != want {
			t.Errorf("attempt %s sent traceparent %q, want its span's %q", call.Attempt, call.Traceparent, want)
		}
	}
	_, resources := collector.received()
	named := false
	for _, r := range resources {
		for _, kv := range r.GetAttributes() {
			named = named || (kv.GetKey() == "service.name" && kv.GetValue().GetStringValue() == "reviewledger-e2e")
		}
	}
	if !named {
		t.Error("no resource named reviewledger-e2e: OTEL_SERVICE_NAME was not applied")
	}
}
