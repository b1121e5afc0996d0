package main

import (
	"bytes"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
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
