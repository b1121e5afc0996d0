package projections

import (
	"context"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reviewledger/reviewledger/eventstore/storeerr"
)

// SLOSummary is the body of GET /v1/slo (docs/contracts.md §2), extended with the
// window it covers.
type SLOSummary struct {
	Total                  int64       `json:"total"`
	CompletedWithinBudget  int64       `json:"completed_within_budget"`
	WithinBudgetRatio      float64     `json:"within_budget_ratio"`
	Escalated              int64       `json:"escalated"`
	ConflictingCompletions int64       `json:"conflicting_completions"`
	LatencyMS              Percentiles `json:"latency_ms"`
	ManualQueue            QueueStats  `json:"manual_queue"`
	// Objective is the class's objective, or for every class the
	// objectives combined (weighted by the reviews concluded in the
	// window); ErrorBudget what the window's reviews used of it, and
	// BurnRate the window's error ratio over the error budget (equal to
	// ErrorBudget.SpentRatio).
	Objective    float64       `json:"objective"`
	ErrorBudget  ErrorBudget   `json:"error_budget"`
	BurnRate     float64       `json:"burn_rate"`
	ContentClass string        `json:"content_class,omitempty"`
	From         time.Time     `json:"from"`
	To           time.Time     `json:"to"`
	Window       time.Duration `json:"-"`
}

// Percentiles are estimates from a log-spaced histogram, in milliseconds;
// each is within 9.1% of the true value (docs/projections.md).
type Percentiles struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
}

// QueueStats describes the manual queue now.
type QueueStats struct {
	Depth            int64   `json:"depth"`
	OldestAgeSeconds float64 `json:"oldest_age_seconds"`
}

// window returns the first minute a window ending at now covers.
func windowStart(window time.Duration, now time.Time) (time.Time, error) {
	if window <= 0 {
		return time.Time{}, invalid("window", "must be a positive duration, got %s", window)
	}
	if window > 366*24*time.Hour {
		return time.Time{}, invalid("window", "must be at most 366 days, got %s", window)
	}
	return minute(now.Add(-window)), nil
}

// SLO summarizes the reviews of class (every class when empty) submitted
// in the window ending at now, counted in whole minutes: the minute
// containing now-window is included.
//
// Total counts submissions; CompletedWithinBudget those that got a complete
// finding or a moderator's decision at or before their deadline (pending
// ones count in Total only); Escalated those that left the automated path;
// LatencyMS the time from submission to the first finding or escalation.
// ConflictingCompletions counts the late or duplicate completions refused
// in the window (ConflictingCompletionRecorded events, by the minute they
// were refused). ManualQueue is the queue now.
func (db *DB) SLO(ctx context.Context, window time.Duration, class string, now time.Time) (SLOSummary, error) {
	return readFrom(ctx, db, func(db *DB) (SLOSummary, error) { return db.slo(ctx, window, class, now) })
}

func (db *DB) slo(ctx context.Context, window time.Duration, class string, now time.Time) (SLOSummary, error) {
	from, err := windowStart(window, now)
	if err != nil {
		return SLOSummary{}, err
	}
	out := SLOSummary{ContentClass: class, From: from, To: now, Window: window}
	span := db.spanOf(from, now)
	var hist histogram
	var oldest *time.Time
	tallies := map[string]*classTally{}
	tally := func(c string) *classTally {
		t := tallies[c]
		if t == nil {
			t = &classTally{}
			tallies[c] = t
		}
		return t
	}
	err = pgx.BeginTxFunc(ctx, db.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT content_class, sum(submitted), sum(completed_within_budget), sum(escalated)
			FROM `+spanRows("content_class, submitted, completed_within_budget, escalated", "slo_minute", "slo_hour")+`
			GROUP BY content_class`, span.args(class)...)
		if err != nil {
			return err
		}
		var (
			c       string
			a, b, d int64
		)
		if _, err := pgx.ForEachRow(rows, []any{&c, &a, &b, &d}, func() error {
			t := tally(c)
			t.submitted, t.completed, t.escalated = a, b, d
			out.Total, out.CompletedWithinBudget, out.Escalated = out.Total+a, out.CompletedWithinBudget+b, out.Escalated+d
			return nil
		}); err != nil {
			return err
		}
		// One read of the latency rows: per class and bucket, the classes'
		// concluded reviews and the histogram summed from them.
		rows, err = tx.Query(ctx, `SELECT content_class, bucket, sum(n)
			FROM `+spanRows("content_class, bucket, n", histogramRows("slo_latency"), histogramRows("slo_latency_hour"))+`
			GROUP BY content_class, bucket`, span.args(class)...)
		if err != nil {
			return err
		}
		var bucket int16
		if _, err := pgx.ForEachRow(rows, []any{&c, &bucket, &a}, func() error {
			tally(c).concluded += a
			if bucket >= 0 && int(bucket) < numBuckets {
				hist[bucket] += a
			}
			return nil
		}); err != nil {
			return err
		}
		err = tx.QueryRow(ctx, `SELECT coalesce(sum(n), 0)
			FROM `+spanRows("content_class, n", "slo_conflict", "slo_conflict_hour"), span.args(class)...).
			Scan(&out.ConflictingCompletions)
		if err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT count(*), min(escalated_at) FROM manual_queue WHERE $1 = '' OR content_class = $1`, class).
			Scan(&out.ManualQueue.Depth, &oldest)
	})
	if err != nil {
		return SLOSummary{}, storeerr.Wrap(ctx, "slo", err)
	}
	out.WithinBudgetRatio = ratio(out.CompletedWithinBudget, out.Total)
	out.LatencyMS = hist.percentiles()
	if oldest != nil {
		out.ManualQueue.OldestAgeSeconds = seconds(now.Sub(*oldest))
	}
	out.ErrorBudget = budget(tallies, db.objective)
	out.BurnRate = out.ErrorBudget.SpentRatio
	if class != "" {
		out.Objective = db.objective(class)
	} else {
		out.Objective = combinedObjective(out.ErrorBudget, db.classes(slices.Collect(maps.Keys(tallies))), db.objective)
	}
	return out, nil
}

// ServiceTimes is the measured attempt service time of one class: input for
// choosing attempt_timeout against data rather than guesses.
type ServiceTimes struct {
	ContentClass string `json:"content_class"`
	// Attempts ended in the window: Findings + Timeouts + Failures.
	Attempts int64 `json:"attempts"`
	Findings int64 `json:"findings"`
	// Timeouts are attempts classified deadline_exceeded; Failures every
	// other attempt that produced no usable finding.
	Timeouts    int64   `json:"timeouts"`
	Failures    int64   `json:"failures"`
	TimeoutRate float64 `json:"timeout_rate"`
	// FindingMS are percentiles of the time to a complete finding. Attempts
	// that timed out are censored at their timeout and not in it; a high
	// timeout rate means the true tail is longer than FindingMS shows.
	FindingMS Percentiles `json:"finding_ms"`
	// AttemptMS are percentiles over every ended attempt.
	AttemptMS Percentiles `json:"attempt_ms"`
	// Buckets is the distribution behind the percentiles: the attempts
	// per histogram bucket and outcome, empty buckets left out, shortest
	// first.
	Buckets []AttemptBucket `json:"buckets"`
}

// AttemptBucket counts the attempts whose duration was in (FromMS, ToMS]
// milliseconds; ToMS is null for the last bucket, which has no bound.
type AttemptBucket struct {
	FromMS   float64  `json:"from_ms"`
	ToMS     *float64 `json:"to_ms"`
	Findings int64    `json:"findings"`
	Timeouts int64    `json:"timeouts"`
	Failures int64    `json:"failures"`
}

// bucketBounds returns the bounds of histogram bucket b in milliseconds;
// to is nil for the last.
func bucketBounds(b int) (from float64, to *float64) {
	switch {
	case b <= 0:
		return 0, ptr(1.0)
	case b >= numBuckets-1:
		return math.Exp2(float64(numBuckets-2) / bucketsPerDoubling), nil
	}
	return math.Exp2(float64(b-1) / bucketsPerDoubling), ptr(math.Exp2(float64(b) / bucketsPerDoubling))
}

// AttemptServiceTimes returns, per class (only class when not empty), the
// attempts that ended in the window ending at now and their measured
// service-time percentiles, in class order.
func (db *DB) AttemptServiceTimes(ctx context.Context, class string, window time.Duration, now time.Time) ([]ServiceTimes, error) {
	return readFrom(ctx, db, func(db *DB) ([]ServiceTimes, error) { return db.attemptServiceTimes(ctx, class, window, now) })
}

func (db *DB) attemptServiceTimes(ctx context.Context, class string, window time.Duration, now time.Time) ([]ServiceTimes, error) {
	from, err := windowStart(window, now)
	if err != nil {
		return nil, err
	}
	rows, err := db.pool.Query(ctx, `SELECT content_class, outcome, bucket, sum(n)
		FROM `+spanRows("content_class, outcome, bucket, n", histogramRows("slo_attempt"), histogramRows("slo_attempt_hour"))+`
		GROUP BY content_class, outcome, bucket ORDER BY content_class`, db.spanOf(from, now).args(class)...)
	if err != nil {
		return nil, storeerr.Wrap(ctx, "attempt service times", err)
	}
	type acc struct {
		st                        ServiceTimes
		found, ended, late, fails histogram
	}
	var (
		order     []*acc
		byClass   = map[string]*acc{}
		cls, kind string
		b         int16
		n         int64
	)
	_, err = pgx.ForEachRow(rows, []any{&cls, &kind, &b, &n}, func() error {
		a := byClass[cls]
		if a == nil {
			a = &acc{st: ServiceTimes{ContentClass: cls}}
			byClass[cls] = a
			order = append(order, a)
		}
		if b < 0 || int(b) >= numBuckets {
			return nil
		}
		a.st.Attempts += n
		a.ended[b] += n
		switch kind {
		case outcomeFinding:
			a.st.Findings += n
			a.found[b] += n
		case outcomeTimeout:
			a.st.Timeouts += n
			a.late[b] += n
		default:
			a.st.Failures += n
			a.fails[b] += n
		}
		return nil
	})
	if err != nil {
		return nil, storeerr.Wrap(ctx, "attempt service times", err)
	}
	out := make([]ServiceTimes, 0, len(order))
	for _, a := range order {
		st := a.st
		if st.Attempts > 0 {
			st.TimeoutRate = float64(st.Timeouts) / float64(st.Attempts)
		}
		st.FindingMS = Percentiles{P50: a.found.quantile(0.5), P90: a.found.quantile(0.9), P99: a.found.quantile(0.99)}
		st.AttemptMS = Percentiles{P50: a.ended.quantile(0.5), P90: a.ended.quantile(0.9), P99: a.ended.quantile(0.99)}
		st.Buckets = []AttemptBucket{}
		for b, n := range a.ended {
			if n == 0 {
				continue
			}
			from, to := bucketBounds(b)
			st.Buckets = append(st.Buckets, AttemptBucket{FromMS: math.Round(from*1000) / 1000, ToMS: roundMS(to),
				Findings: a.found[b], Timeouts: a.late[b], Failures: a.fails[b]})
		}
		out = append(out, st)
	}
	return out, nil
}

func roundMS(ms *float64) *float64 {
	if ms == nil {
		return nil
	}
	return ptr(math.Round(*ms*1000) / 1000)
}
