package main

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestMedianOfOddAndEvenCounts(t *testing.T) {
	rounds := func(rates ...float64) []round {
		var rs []round
		for _, r := range rates {
			rs = append(rs, round{rl: figures{PerSecond: r}})
		}
		return rs
	}
	rate := func(r round) float64 { return r.rl.PerSecond }
	for _, c := range []struct {
		rates []float64
		want  float64
	}{
		{nil, 0},
		{[]float64{7}, 7},
		{[]float64{9, 1, 5}, 5},
		{[]float64{4, 1, 3, 10}, 3.5},
	} {
		if got := median(rounds(c.rates...), rate); got != c.want {
			t.Errorf("median of %v = %v, want %v", c.rates, got, c.want)
		}
	}
}

func TestParseProcStat(t *testing.T) {
	// A command name with a space and a parenthesis, as a process may
	// give itself; utime 250 and stime 50 ticks, cutime 7, cstime 3.
	line := "4242 (post gres) x) S 17 4242 4242 0 -1 4194560 99 0 0 0 250 50 7 3 20 0 1 0 65150 3133440 412"
	st, err := parseProcStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if st.ppid != 17 || st.own != 3*time.Second || st.waits != 100*time.Millisecond {
		t.Errorf("parsed %+v, want ppid 17, own 3s, waits 100ms", st)
	}
	for _, bad := range []string{"4242 no parenthesis", "1 (x) S 1 2 3", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 ten 50 7 3 20"} {
		if _, err := parseProcStat([]byte(bad)); err == nil {
			t.Errorf("parseProcStat(%q) gave no error", bad)
		}
	}
}

func TestVmHWM(t *testing.T) {
	status := "Name:\treviewledger\nVmPeak:\t 1234 kB\nVmHWM:\t   65536 kB\nVmRSS:\t 60000 kB\n"
	got, err := vmHWM(status)
	if err != nil || got != 64<<20 {
		t.Errorf("vmHWM = %d, %v; want %d", got, err, 64<<20)
	}
	if _, err := vmHWM("Name:\tx\nVmRSS:\t1 kB\n"); err == nil {
		t.Error("no VmHWM line gave no error")
	}
}

func TestCPUText(t *testing.T) {
	c := cpuShare{Server: 250 * time.Microsecond, Postgres: 150 * time.Microsecond, Bench: 100 * time.Microsecond}
	for _, tc := range []struct {
		server, pg bool
		want       string
	}{
		{true, true, "0.25+0.15+0.10=0.50ms"},
		{false, true, "0.15+0.10=0.25ms"},
		{true, false, "0.25+-+0.10=0.35ms"},
	} {
		if got := cpuText(c, tc.server, tc.pg); got != tc.want {
			t.Errorf("cpuText(server %v, pg %v) = %q, want %q", tc.server, tc.pg, got, tc.want)
		}
	}
}

// A report marks every figure that misses its target, each round's
// included, and judges peak RSS by the highest round, not the median.
func TestReportMarksEveryMissedTarget(t *testing.T) {
	rd := func(rl, crud float64, rss uint64) round {
		return round{rl: figures{PerSecond: rl, PeakRSS: rss, Elapsed: time.Second}, crud: figures{PerSecond: crud}}
	}
	rep := &report{cfg: Config{Reviews: 10, Clients: 1, CRUDClients: 1, Observe: observeSubmit}, rounds: []round{
		rd(1200, 1000, 60e6), // ratio 1.2, RSS ok
		rd(500, 1000, 250e6), // ratio 0.5, RSS over
		rd(1100, 1000, 70e6), // ratio 1.1
	}, latency: &latencyRun{rate: 400, reviews: 4000, elapsed: 10 * time.Second, p50: 5 * time.Millisecond, p99: 150 * time.Millisecond}}
	var b strings.Builder
	rep.print(&b)
	out := b.String()
	lines := strings.Split(out, "\n")
	rowOf := func(prefix string) string {
		for _, l := range lines {
			if strings.HasPrefix(l, prefix) {
				return l
			}
		}
		t.Fatalf("no line starting %q in\n%s", prefix, out)
		return ""
	}
	if r := rowOf("1 "); !strings.HasSuffix(r, " ok") {
		t.Errorf("round 1 meets its targets, printed %q", r)
	}
	if r := rowOf("2 "); !strings.HasSuffix(r, "BELOW TARGET (ratio, RSS)") {
		t.Errorf("round 2 misses ratio and RSS, printed %q", r)
	}
	if r := rowOf("ratio to CRUD"); !strings.Contains(r, "1.100") || !strings.HasSuffix(r, ": ok") {
		t.Errorf("median ratio 1.1 meets its target, printed %q", r)
	}
	if r := rowOf("peak RSS"); !strings.Contains(r, "250 MB") || !strings.HasSuffix(r, "BELOW TARGET") {
		t.Errorf("the highest RSS, 250 MB, misses its target, printed %q", r)
	}
	if r := rowOf("latency run"); !strings.Contains(r, "4000 reviews at 400/s") || !strings.HasSuffix(r, "BELOW TARGET") {
		t.Errorf("p99 150ms misses its target, printed %q", r)
	}
	if got := ratioVerdict(0.49); !strings.Contains(got, "a defect") {
		t.Errorf("ratioVerdict(0.49) = %q, want it called a defect", got)
	}
}

// A closed loop that ends before its reviews are all run is an error, not
// a short round reported as a full one.
func TestClosedLoopCutShortIsAnError(t *testing.T) {
	var served atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		now := time.Now().UTC().Format(time.RFC3339Nano)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"review_id":"x","state":"accepted","submitted_at":"` + now + `","decided_at":"` + now + `"}`))
	}))
	defer srv.Close()
	c := newClient(srv.URL, "token", 1, observeSubmit)
	got, err := closedLoop(context.Background(), c, 0, 3, 1)
	if err != nil || len(got) != 3 {
		t.Fatalf("a full loop: %d latencies, %v", len(got), err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = closedLoop(ctx, c, 0, 3, 1)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("a loop whose context ended: %v, want context.Canceled", err)
	}
	if n := served.Load(); n != 3 {
		t.Errorf("the server was asked %d times, want 3 (none after the context ended)", n)
	}
}
