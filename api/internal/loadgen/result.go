package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/reviewledger/reviewledger/projections"
)

// Result is what a run measured.
type Result struct {
	Config    Config
	PoolConns int32
	CPUs      int
	GoVersion string

	Healthz, Insert, Submit phase

	Submitted int // reviews created (202)
	Decided   int // of them, with a finding or an escalation in the ledger
	// DecidedAfter is the time from the last submission's answer until
	// every review was decided; CurrentAfter until the read models had
	// applied every event as well.
	DecidedAfter, CurrentAfter time.Duration
	// LagEvents and LagSeconds are the largest projection lag when the
	// last review was decided.
	LagEvents  int64
	LagSeconds float64

	// From the ledger: submission to first finding or escalation of each
	// review, the rate of decisions from the first submission to the last
	// decision, escalations, attempts started.
	EndToEnd           []time.Duration
	CompletedPerSecond float64
	LedgerEscalated    int
	Attempts           int

	// SLO is GET /v1/slo for the class submitted, once the read models
	// were current.
	SLO projections.SLOSummary

	Memory memory
	// ServiceCPU is the CPU time this process used from the first
	// submission until the read models were current (ServiceWall).
	ServiceCPU, ServiceWall time.Duration
}

// SubmitVsHealthz is submit throughput over GET /healthz throughput.
func (r *Result) SubmitVsHealthz() float64 { return ratio(r.Submit.PerSecond(), r.Healthz.PerSecond()) }

// SubmitVsInsert is submit throughput over plain INSERT throughput.
func (r *Result) SubmitVsInsert() float64 { return ratio(r.Submit.PerSecond(), r.Insert.PerSecond()) }

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// Print writes the figures as a short table.
func (r *Result) Print(w io.Writer) {
	c := r.Config
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	ceiling := "none"
	if c.MaxInFlight > 0 {
		ceiling = fmt.Sprint(c.MaxInFlight)
	}
	fmt.Fprintf(tw, "whole service under load: %d reviews, %d concurrent clients, %d workers, pool of %d connections, admission ceiling %s, %d CPUs, %s\n",
		c.Reviews, c.Concurrency, c.Workers, r.PoolConns, ceiling, r.CPUs, r.GoVersion)
	fmt.Fprintf(tw, "class %s: budget %s, attempt timeout %s, %d attempts; simulator: median %s, p99 %s, timeout %.3g, error %.3g, invalid %.3g, async %.3g (late %.3g), reject %.3g\n\n",
		loadClass, c.Budget, c.AttemptTimeout, c.MaxAttempts, c.Sim.MedianLatency, c.Sim.P99Latency,
		c.Sim.TimeoutRate, c.Sim.ErrorRate, c.Sim.InvalidRate, c.Sim.AsyncRate, c.Sim.LateCallbackRate, c.Sim.RejectRate)

	fmt.Fprintln(tw, "REQUESTS\tOK\tERRORS\t429\tPER SECOND\tP50\tP90\tP99\tSUBMIT / THIS")
	for _, p := range []struct {
		phase
		ratio string
	}{
		{r.Healthz, fmt.Sprintf("%.3f", r.SubmitVsHealthz())},
		{r.Insert, fmt.Sprintf("%.3f", r.SubmitVsInsert())},
		{r.Submit, ""},
	} {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.0f\t%s\t%s\t%s\t%s\n", p.Name, p.Requests-p.Errors, p.Errors, p.Throttled, p.PerSecond(),
			ms(p.Quantile(0.5)), ms(p.Quantile(0.9)), ms(p.Quantile(0.99)), p.ratio)
	}
	fmt.Fprintln(tw)

	fmt.Fprintln(tw, "REVIEWS\t")
	fmt.Fprintf(tw, "decided (finding or escalation) / submitted\t%d / %d\n", r.Decided, r.Submitted)
	fmt.Fprintf(tw, "end-to-end, submit → decided (ledger) p50 / p90 / p99\t%s / %s / %s\n",
		ms(quantile(r.EndToEnd, 0.5)), ms(quantile(r.EndToEnd, 0.9)), ms(quantile(r.EndToEnd, 0.99)))
	fmt.Fprintf(tw, "end-to-end (SLO read model, ±9.1%%) p50 / p90 / p99\t%.1f / %.1f / %.1f ms\n", r.SLO.LatencyMS.P50, r.SLO.LatencyMS.P90, r.SLO.LatencyMS.P99)
	fmt.Fprintf(tw, "reviews completed per second (first submission → last decision)\t%.0f\n", r.CompletedPerSecond)
	fmt.Fprintf(tw, "attempts per review\t%.3f\n", ratio(float64(r.Attempts), float64(r.Decided)))
	fmt.Fprintf(tw, "within budget (SLO)\t%d / %d = %.4f\n", r.SLO.CompletedWithinBudget, r.SLO.Total, r.SLO.WithinBudgetRatio)
	fmt.Fprintf(tw, "escalations (SLO / ledger)\t%d / %d\n", r.SLO.Escalated, r.LedgerEscalated)
	fmt.Fprintf(tw, "conflicting completions (SLO)\t%d\n", r.SLO.ConflictingCompletions)
	fmt.Fprintf(tw, "all decided after the last submission\t%s\n", r.DecidedAfter.Round(time.Millisecond))
	fmt.Fprintf(tw, "projection lag then: events / oldest\t%d / %.3f s\n", r.LagEvents, r.LagSeconds)
	fmt.Fprintf(tw, "read models current after the last submission\t%s\n", r.CurrentAfter.Round(time.Millisecond))
	fmt.Fprintln(tw)

	m := r.Memory
	fmt.Fprintln(tw, "PROCESS (service and load generator together)\t")
	if r.ServiceCPU > 0 {
		fmt.Fprintf(tw, "CPU, first submission → read models current\t%s in %s = %.2f of %d cores\n",
			r.ServiceCPU.Round(time.Millisecond), r.ServiceWall.Round(time.Millisecond), r.ServiceCPU.Seconds()/r.ServiceWall.Seconds(), r.CPUs)
	}
	fmt.Fprintf(tw, "peak RSS\t%s\n", mib(m.PeakRSS))
	fmt.Fprintf(tw, "peak Go heap in use / allocated / runtime total (Sys)\t%s / %s / %s\n", mib(m.PeakHeapInuse), mib(m.PeakHeapAlloc), mib(m.PeakSys))
	fmt.Fprintf(tw, "peak goroutines / garbage collections\t%d / %d\n", m.PeakGoroutines, m.NumGC)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

func mib(b uint64) string {
	if b == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
}
