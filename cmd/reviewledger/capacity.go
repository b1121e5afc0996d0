package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/projections"
)

// CapacityCmd estimates the workers a review load needs (Little's law,
// retries counted) and, from measured data, suggests timeouts per class.
type CapacityCmd struct {
	Config         `embed:""`
	Rate           float64       `name:"rate" default:"20" help:"Reviews submitted per second."`
	ServiceTime    time.Duration `name:"service-time" default:"400ms" help:"How long an attempt that answers holds a worker."`
	TimeoutRate    float64       `name:"timeout-rate" default:"0" help:"Fraction of attempts that time out (0 to below 1)."`
	MaxAttempts    int           `name:"max-attempts" default:"3" help:"Attempts per review, the first included."`
	AttemptTimeout time.Duration `name:"attempt-timeout" default:"10s" help:"How long a timed-out attempt holds a worker."`
	FromDB         bool          `name:"from-db" help:"Use the arrival rate, service times and timeout rates measured in the SLO read models, per class."`
	Window         time.Duration `name:"window" default:"24h" help:"With --from-db: the measurement window."`
}

// Validate refuses bad input as a usage error, naming the flag.
func (c *CapacityCmd) Validate() error {
	if c.FromDB {
		if c.Window <= 0 {
			return fmt.Errorf("--window: must be positive, got %s", c.Window)
		}
		return nil
	}
	err := c.input().Validate()
	var fe *domain.FieldError
	if errors.As(err, &fe) {
		return fmt.Errorf("--%s: %s", kebab(fe.Field), fe.Reason)
	}
	return err
}

func (c *CapacityCmd) input() domain.CapacityInput {
	return domain.CapacityInput{Rate: c.Rate, ServiceTime: c.ServiceTime, TimeoutRate: c.TimeoutRate, MaxAttempts: c.MaxAttempts, AttemptTimeout: c.AttemptTimeout}
}

// Run prints the estimate.
func (c *CapacityCmd) Run(ctx context.Context, log *slog.Logger, out io.Writer) error {
	if !c.FromDB {
		cp, err := domain.PlanCapacity(c.input())
		if err != nil {
			return err
		}
		return writeCapacity(out, c.input(), cp)
	}
	pool, err := openMigrated(ctx, &c.Config)
	if err != nil {
		return err
	}
	defer pool.Close()
	return capacityFromDB(ctx, out, projections.NewDB(pool), c.Policy, c.Window, time.Now())
}

func writeCapacity(out io.Writer, in domain.CapacityInput, cp domain.Capacity) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Little's law: busy workers = attempts started per second × time each holds a worker\n")
	fmt.Fprintf(tw, "rate %g/s, service time %s, timeout rate %g, attempt timeout %s, max attempts %d\n\n",
		in.Rate, in.ServiceTime, in.TimeoutRate, in.AttemptTimeout, in.MaxAttempts)
	fmt.Fprintln(tw, "ATTEMPT\tSTARTS/S\tHOLD\tWORKERS")
	for _, l := range cp.Layers {
		fmt.Fprintf(tw, "%d\t%.4g\t%s\t%.4g\n", l.Attempt, l.Rate, l.Hold, l.Workers)
	}
	fmt.Fprintf(tw, "total\t\t\t%.4g\n\n", cp.Workers)
	fmt.Fprintf(tw, "worker-equivalents needed: %.4g (mean; provision headroom above it)\n", cp.Workers)
	fmt.Fprintf(tw, "one attempt layer with no timeouts: %g/s × %s = %.4g workers\n", in.Rate, in.ServiceTime, cp.Baseline)
	fmt.Fprintf(tw, "reviews whose every attempt times out: %.4g/s\n", cp.EscalatedRate)
	return tw.Flush()
}

// capacityFromDB plans per class from the measured attempt service times
// (findings' p50 as the service time, their p99 for the suggested timeout)
// and the submission rate of the window.
func capacityFromDB(ctx context.Context, out io.Writer, db *projections.DB, policy domain.Policy, window time.Duration, now time.Time) error {
	times, err := db.AttemptServiceTimes(ctx, "", window, now)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "measured over the last %s\n\n", window)
	fmt.Fprintln(tw, "CLASS\tREVIEWS/S\tATTEMPTS\tTIMEOUT RATE\tFINDING P50\tP99\tWORKERS\tattempt_timeout NOW → SUGGESTED\tbudget NOW → SUGGESTED")
	var total float64
	for _, st := range times {
		slo, err := db.SLO(ctx, window, st.ContentClass, now)
		if err != nil {
			return err
		}
		cp, perr := policy.Class(st.ContentClass)
		if perr != nil || st.Findings == 0 {
			fmt.Fprintf(tw, "%s\t-\t%d\t%.3f\tno findings or class not in the policy\t\t\t\t\n", st.ContentClass, st.Attempts, st.TimeoutRate)
			continue
		}
		rate := float64(slo.Total) / window.Seconds()
		p50 := time.Duration(st.FindingMS.P50 * float64(time.Millisecond))
		p99 := time.Duration(st.FindingMS.P99 * float64(time.Millisecond))
		workers := "-"
		if plan, err := domain.PlanCapacity(domain.CapacityInput{Rate: rate, ServiceTime: max(p50, time.Millisecond),
			TimeoutRate: min(st.TimeoutRate, 0.99), MaxAttempts: cp.MaxAttempts, AttemptTimeout: cp.AttemptTimeout}); err == nil {
			workers = fmt.Sprintf("%.3g", plan.Workers)
			total += plan.Workers
		}
		sug, err := domain.SuggestTimeouts(p99, cp.MaxAttempts, cp.Backoff)
		if err != nil {
			return err
		}
		fmt.Fprintf(tw, "%s\t%.3g\t%d\t%.3f\t%s\t%s\t%s\t%s → %s\t%s → %s\n", st.ContentClass, rate, st.Attempts, st.TimeoutRate,
			p50.Round(time.Millisecond), p99.Round(time.Millisecond), workers, cp.AttemptTimeout, sug.AttemptTimeout, cp.Budget, sug.Budget)
	}
	if len(times) == 0 {
		fmt.Fprintln(tw, "(no attempts ended in the window)")
	}
	fmt.Fprintf(tw, "\nworker-equivalents needed, all classes: %.3g\n", total)
	fmt.Fprintln(tw, "suggested attempt_timeout = 1.5 × measured finding p99; budget = max_attempts × it + the backoff waits.")
	fmt.Fprintln(tw, "Attempts that timed out are censored at their timeout: with a high timeout rate the real tail is longer than measured.")
	return tw.Flush()
}

// kebab turns a field name such as service_time into its flag name.
func kebab(field string) string { return strings.ReplaceAll(field, "_", "-") }
