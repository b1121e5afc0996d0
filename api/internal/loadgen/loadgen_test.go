package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// smallConfig is the default configuration shrunk to a run of a few
// seconds: 50 reviews, 4 clients, a fast simulator that still times out,
// fails, answers invalid findings and calls back, some of it late.
func smallConfig(t *testing.T) Config {
	t.Helper()
	cfg, err := parseFlags([]string{"-reviews", "50", "-concurrency", "4",
		"-budget", "3s", "-attempt-timeout", "300ms", "-sim-median-latency", "5ms", "-sim-p99-latency", "50ms",
		"-sim-timeout-rate", "0.05", "-sim-error-rate", "0.05", "-sim-async-rate", "0.2", "-sim-late-callback-rate", "0.2",
		"-phase-timeout", "30s", "-drain-timeout", "30s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestRunAccountsForEveryReview(t *testing.T) {
	cfg := smallConfig(t)
	cfg.DatabaseURL = dbtest.URL(t)
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	res.Print(&out)
	t.Log("\n" + out.String())

	for _, p := range []phase{res.Healthz, res.Insert, res.Submit} {
		if p.Requests != 50 || p.Errors != 0 || p.Throttled != 0 {
			t.Errorf("%s: %d requests, %d errors (first: %v), want 50 and none", p.Name, p.Requests, p.Errors, p.FirstErr)
		}
		if p50, p90, p99 := p.Quantile(0.5), p.Quantile(0.9), p.Quantile(0.99); p50 <= 0 || p50 > p90 || p90 > p99 {
			t.Errorf("%s: latency p50 %s, p90 %s, p99 %s: not positive and ordered", p.Name, p50, p90, p99)
		}
	}
	if res.Submitted != 50 || res.Decided != 50 || len(res.EndToEnd) != 50 {
		t.Errorf("submitted %d, decided %d, with decision times %d; want 50 each", res.Submitted, res.Decided, len(res.EndToEnd))
	}
	if s := res.SLO; s.Total != 50 || s.CompletedWithinBudget+s.Escalated != 50 {
		t.Errorf("SLO: total %d, within budget %d, escalated %d: want every one of 50 accounted for", s.Total, s.CompletedWithinBudget, s.Escalated)
	}
	if res.SLO.Escalated != int64(res.LedgerEscalated) {
		t.Errorf("escalations: SLO %d, ledger %d", res.SLO.Escalated, res.LedgerEscalated)
	}
	if res.Attempts < res.Decided {
		t.Errorf("%d attempts for %d decided reviews", res.Attempts, res.Decided)
	}
	if p50, p99 := quantile(res.EndToEnd, 0.5), quantile(res.EndToEnd, 0.99); p50 <= 0 || p99 < p50 {
		t.Errorf("end-to-end p50 %s, p99 %s", p50, p99)
	}
	for name, v := range map[string]float64{
		"submit/healthz": res.SubmitVsHealthz(), "submit/insert": res.SubmitVsInsert(), "completed per second": res.CompletedPerSecond,
	} {
		if !(v > 0) || math.IsInf(v, 0) {
			t.Errorf("%s = %v, want positive and finite", name, v)
		}
	}
	if res.CurrentAfter < res.DecidedAfter {
		t.Errorf("read models current after %s, before every review was decided (%s)", res.CurrentAfter, res.DecidedAfter)
	}
	if res.Memory.PeakHeapAlloc == 0 || res.Memory.PeakSys < res.Memory.PeakHeapInuse || res.Memory.PeakGoroutines < cfg.Concurrency {
		t.Errorf("memory marks %+v", res.Memory)
	}
	for _, want := range []string{"GET /healthz", "INSERT", "POST /v1/reviews", "decided (finding or escalation) / submitted", "50 / 50", "peak RSS"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("printed table lacks %q", want)
		}
	}
}

func TestFlagsNameTheSettingAtFault(t *testing.T) {
	if _, err := parseFlags(nil, io.Discard); err != nil {
		t.Fatalf("defaults refused: %v", err)
	}
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"-reviews", "0"}, "-reviews"},
		{[]string{"-concurrency", "0"}, "-concurrency"},
		{[]string{"-workers", "0"}, "-workers"},
		{[]string{"-pool-max-conns", "-1"}, "-pool-max-conns"},
		{[]string{"-phase-timeout", "0s"}, "-phase-timeout"},
		{[]string{"-drain-timeout", "-1s"}, "-drain-timeout"},
		{[]string{"-sim-error-rate", "1.5"}, "-sim-error-rate"},
		{[]string{"-sim-timeout-rate", "0.6", "-sim-async-rate", "0.6"}, "-sim-async-rate"},
		{[]string{"-sim-median-latency", "0s"}, "-sim-median-latency"},
		{[]string{"-sim-p99-latency", "1ms"}, "-sim-p99-latency"},
		{[]string{"-attempt-timeout", "20s"}, "-attempt-timeout"},
		{[]string{"-database", "postgres://a b"}, "-database"},
		{[]string{"extra"}, "unexpected arguments"},
	} {
		_, err := parseFlags(tc.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%v: error %v, want one naming %s", tc.args, err, tc.flag)
		}
	}
}

func TestDriveMakesEveryRequestOnce(t *testing.T) {
	seen := make([]int, 100)
	fail := errors.New("refused")
	p := drive(context.Background(), "test", 100, 7, time.Minute, func(_ context.Context, i int) (time.Duration, error) {
		seen[i]++ // each index goes to one goroutine only
		if i%10 == 0 {
			return 0, fail
		}
		return time.Duration(i) * time.Millisecond, nil
	})
	for i, n := range seen {
		if n != 1 {
			t.Fatalf("request %d made %d times", i, n)
		}
	}
	if p.Requests != 100 || p.Errors != 10 || len(p.latencies) != 90 || !errors.Is(p.FirstErr, fail) {
		t.Errorf("requests %d, errors %d, latencies %d, first error %v; want 100, 10, 90, %v", p.Requests, p.Errors, len(p.latencies), p.FirstErr, fail)
	}
}

func TestDriveStopsAtItsLimit(t *testing.T) {
	// Every request waits for the phase to end: the loop must stop by
	// itself, having started one request per client and no more.
	p := drive(context.Background(), "test", 1000, 4, 10*time.Millisecond, func(ctx context.Context, _ int) (time.Duration, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	})
	if p.Requests != 4 || p.Errors != 4 || !errors.Is(p.FirstErr, context.DeadlineExceeded) {
		t.Errorf("requests %d, errors %d, first error %v; want 4, 4, deadline exceeded", p.Requests, p.Errors, p.FirstErr)
	}
}

func TestQuantileNearestRank(t *testing.T) {
	ds := make([]time.Duration, 100)
	for i := range ds {
		ds[len(ds)-1-i] = time.Duration(i+1) * time.Millisecond // unsorted
	}
	for q, want := range map[float64]time.Duration{0.5: 50 * time.Millisecond, 0.9: 90 * time.Millisecond, 0.99: 99 * time.Millisecond, 1: 100 * time.Millisecond} {
		if got := quantile(ds, q); got != want {
			t.Errorf("q%v = %s, want %s", q, got, want)
		}
	}
	if got := quantile(nil, 0.5); got != 0 {
		t.Errorf("empty: %s", got)
	}
	if ds[0] != 100*time.Millisecond {
		t.Error("quantile sorted its input in place")
	}
}

func TestSubmitWaitsOutTooManyRequests(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if calls.Add(1) <= 2 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()

	_, throttled, err := submit(context.Background(), srv.Client(), srv.URL, "tok", []byte(`{}`))
	if err != nil || throttled != 2 || calls.Load() != 3 {
		t.Errorf("err %v, throttled %d, calls %d; want nil, 2, 3", err, throttled, calls.Load())
	}
	_, throttled, err = submit(context.Background(), srv.Client(), srv.URL, "wrong", []byte(`{}`))
	var se *statusError
	if !errors.As(err, &se) || se.code != http.StatusUnauthorized || throttled != 0 {
		t.Errorf("wrong token: err %v, throttled %d; want a 401 status error, none throttled", err, throttled)
	}
}
