package projections

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reviewledger/reviewledger/eventstore/storeerr"
)

// ErrorBudget is how much of a window's error budget its reviews used.
// Concluded counts the reviews submitted in the window that reached an
// outcome (a finding or an escalation); Missed those of them that did not
// get a complete finding or a moderator's decision within budget; Allowed
// the misses the objectives allow: the sum over classes of (1 - objective)
// × concluded. SpentRatio is Missed / Allowed (above 1: overspent) and
// RemainingRatio 1 - SpentRatio; both are 0 and 1 with nothing concluded.
// Over a window, SpentRatio is also the window's burn rate: the error
// ratio divided by the error budget.
type ErrorBudget struct {
	Concluded      int64   `json:"concluded"`
	Missed         int64   `json:"missed"`
	Allowed        float64 `json:"allowed"`
	SpentRatio     float64 `json:"spent_ratio"`
	RemainingRatio float64 `json:"remaining_ratio"`
}

// classTally is what one class contributed to a window or a step.
type classTally struct {
	submitted, completed, escalated, concluded int64
}

// budget returns the error budget of tallies by class, with objective
// giving each class's objective. The classes are summed in name order, so
// that the same tallies always give the same float.
func budget(byClass map[string]*classTally, objective func(string) float64) ErrorBudget {
	var b ErrorBudget
	for _, class := range slices.Sorted(maps.Keys(byClass)) {
		t := byClass[class]
		missed := max(0, t.concluded-t.completed)
		b.Concluded += t.concluded
		b.Missed += missed
		b.Allowed += (1 - objective(class)) * float64(t.concluded)
	}
	b.RemainingRatio = 1
	if b.Allowed > 0 {
		b.SpentRatio = float64(b.Missed) / b.Allowed
		b.RemainingRatio = 1 - b.SpentRatio
	}
	return b
}

// combinedObjective is the objective of several classes together: the
// share of concluded reviews the objectives want within budget, weighted
// by each class's concluded reviews; the lowest of the classes' objectives
// when none concluded.
func combinedObjective(b ErrorBudget, classes []string, objective func(string) float64) float64 {
	if b.Concluded > 0 {
		return 1 - b.Allowed/float64(b.Concluded)
	}
	lowest := objective("")
	for _, c := range classes {
		lowest = min(lowest, objective(c))
	}
	return lowest
}

// Series is the body of GET /v1/slo/series: the SLO figures of a window,
// step by step.
type Series struct {
	ContentClass string    `json:"content_class,omitempty"`
	From         time.Time `json:"from"`
	To           time.Time `json:"to"`
	StepSeconds  int64     `json:"step_seconds"`
	// Objective is the class's, or for every class the combined objective
	// (combinedObjective) over the window.
	Objective float64       `json:"objective"`
	Points    []SeriesPoint `json:"points"`
}

// SeriesPoint is one step, [From, To). Reviews count in the step they were
// submitted in, as in GET /v1/slo; conflicting completions in the step
// they were refused in; the manual queue is as it stood at the step's end
// (or now, for the step now is in). Ratios are null without reviews to
// compute them from.
type SeriesPoint struct {
	From                   time.Time `json:"from"`
	To                     time.Time `json:"to"`
	Total                  int64     `json:"total"`
	CompletedWithinBudget  int64     `json:"completed_within_budget"`
	WithinBudgetRatio      *float64  `json:"within_budget_ratio"`
	Escalated              int64     `json:"escalated"`
	ConflictingCompletions int64     `json:"conflicting_completions"`
	Concluded              int64     `json:"concluded"`
	Missed                 int64     `json:"missed"`
	// BurnRate is the step's error ratio (Missed / Concluded) divided by
	// its error budget: 1 spends the budget exactly at the objective.
	BurnRate *float64 `json:"burn_rate"`
	// ErrorBudgetRemaining is the share of the error budget left from the
	// window's start up to this step's end (negative: overspent).
	ErrorBudgetRemaining float64     `json:"error_budget_remaining"`
	LatencyMS            Percentiles `json:"latency_ms"`
	ManualQueue          QueueStats  `json:"manual_queue"`
}

// queueStay is a review's first stay in the manual queue (slo_queue);
// left is nil while it waits.
type queueStay struct {
	entered time.Time
	left    *time.Time
}

// queueAt returns the queue at each instant of ends (ascending): the stays
// (in entry order) that had entered at or before it and not left by then,
// and the age of the oldest. One pass over both: a stay that has left by
// one end has left by every later one.
func queueAt(all []queueStay, ends []time.Time) []QueueStats {
	out := make([]QueueStats, len(ends))
	stays := make([]queueStay, 0, len(all))
	lefts := make([]time.Time, 0, len(all))
	for _, s := range all {
		switch {
		case s.left == nil:
		case !s.left.After(s.entered):
			continue // left as it entered: in the queue at no instant
		default:
			lefts = append(lefts, *s.left)
		}
		stays = append(stays, s)
	}
	slices.SortFunc(lefts, time.Time.Compare)
	var entered, left, oldest int
	for i, at := range ends {
		for entered < len(stays) && !stays[entered].entered.After(at) {
			entered++
		}
		for left < len(lefts) && !lefts[left].After(at) {
			left++
		}
		for oldest < entered && stays[oldest].left != nil && !stays[oldest].left.After(at) {
			oldest++
		}
		out[i].Depth = int64(entered - left)
		if oldest < entered {
			out[i].OldestAgeSeconds = seconds(at.Sub(stays[oldest].entered))
		}
	}
	return out
}

// MaxSeriesPoints bounds the steps of one series.
const MaxSeriesPoints = 1440

// seriesStart returns where a series of window ending at now starts: the
// step boundary (steps are aligned to the Unix epoch) at or before
// now-window.
func seriesRange(window, step time.Duration, now time.Time) (from time.Time, n int, err error) {
	if _, err := windowStart(window, now); err != nil {
		return time.Time{}, 0, err
	}
	if step < time.Minute || step%time.Minute != 0 {
		return time.Time{}, 0, invalid("step", "must be a whole number of minutes, at least 1m, got %s", step)
	}
	from = now.Add(-window).UTC().Truncate(step)
	n = int(now.Sub(from)/step) + 1
	if n > MaxSeriesPoints {
		return time.Time{}, 0, invalid("step", "%s over %s makes %d points, more than %d: choose a longer step", step, window, n, MaxSeriesPoints)
	}
	return from, n, nil
}

// SLOSeries returns the SLO figures of class (every class when empty) for
// the window ending at now, in steps of step (a whole number of minutes,
// at most MaxSeriesPoints steps). The last step is the one holding now.
func (db *DB) SLOSeries(ctx context.Context, window, step time.Duration, class string, now time.Time) (Series, error) {
	return readFrom(ctx, db, func(db *DB) (Series, error) { return db.sloSeries(ctx, window, step, class, now) })
}

func (db *DB) sloSeries(ctx context.Context, window, step time.Duration, class string, now time.Time) (Series, error) {
	from, n, err := seriesRange(window, step, now)
	if err != nil {
		return Series{}, err
	}
	to := from.Add(time.Duration(n) * step)
	out := Series{ContentClass: class, From: from, To: to, StepSeconds: int64(step / time.Second), Points: make([]SeriesPoint, n)}
	tallies := make([]map[string]*classTally, n)
	hists := make([]histogram, n)
	for i := range out.Points {
		out.Points[i].From, out.Points[i].To = from.Add(time.Duration(i)*step), from.Add(time.Duration(i+1)*step)
		tallies[i] = map[string]*classTally{}
	}
	tally := func(i int, c string) *classTally {
		t := tallies[i][c]
		if t == nil {
			t = &classTally{}
			tallies[i][c] = t
		}
		return t
	}
	// Rows are grouped by step in SQL: a step is floor((minute - from) /
	// step) with both in seconds. Steps of whole hours start on an hour
	// (they are aligned to the epoch) and hold whole hours: they are read
	// from the hourly rollups, which hold the same sums.
	g := sloGrains[0]
	if step%time.Hour == 0 && !db.minutesOnly {
		g = sloGrains[1]
	}
	stepOf := `floor(extract(epoch FROM ` + g.col + ` - $1::timestamptz) / $3)::int`
	args := []any{from, to, step.Seconds(), class}
	classWhere := g.col + ` >= $1 AND ` + g.col + ` < $2 AND ($4 = '' OR content_class = $4)`
	ends := make([]time.Time, n)
	for i := range ends {
		ends[i] = out.Points[i].To
		if ends[i].After(now) {
			ends[i] = now
		}
	}
	err = pgx.BeginTxFunc(ctx, db.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT `+stepOf+`, content_class, sum(submitted), sum(completed_within_budget), sum(escalated)
			FROM `+g.minutes+` WHERE `+classWhere+` GROUP BY 1, 2`, args...)
		if err != nil {
			return err
		}
		var (
			i          int
			c          string
			a, b, d, k int64
			bucket     int16
		)
		if _, err := pgx.ForEachRow(rows, []any{&i, &c, &a, &b, &d}, func() error {
			if i >= 0 && i < n {
				t := tally(i, c)
				t.submitted, t.completed, t.escalated = t.submitted+a, t.completed+b, t.escalated+d
			}
			return nil
		}); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `SELECT `+stepOf+`, content_class, bucket, sum(n)
			FROM `+histogramRows(g.latency)+` WHERE `+classWhere+` GROUP BY 1, 2, 3`, args...)
		if err != nil {
			return err
		}
		if _, err := pgx.ForEachRow(rows, []any{&i, &c, &bucket, &k}, func() error {
			if i >= 0 && i < n && bucket >= 0 && int(bucket) < numBuckets {
				hists[i][bucket] += k
				tally(i, c).concluded += k
			}
			return nil
		}); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `SELECT `+stepOf+`, sum(n) FROM `+g.conflicts+` WHERE `+classWhere+` GROUP BY 1`, args...)
		if err != nil {
			return err
		}
		if _, err := pgx.ForEachRow(rows, []any{&i, &k}, func() error {
			if i >= 0 && i < n {
				out.Points[i].ConflictingCompletions += k
			}
			return nil
		}); err != nil {
			return err
		}
		// The queue at each step's end: the reviews that had entered and
		// not yet left, swept in entry order.
		rows, err = tx.Query(ctx, queueStaysSQL, ends[0], ends[n-1], class)
		if err != nil {
			return err
		}
		var stays []queueStay
		var stay queueStay
		if _, err := pgx.ForEachRow(rows, []any{&stay.entered, &stay.left}, func() error {
			stays = append(stays, stay)
			return nil
		}); err != nil {
			return err
		}
		for i, q := range queueAt(stays, ends) {
			out.Points[i].ManualQueue = q
		}
		return nil
	})
	if err != nil {
		return Series{}, storeerr.Wrap(ctx, "slo series", err)
	}
	windowTally := map[string]*classTally{}
	var classes []string
	for i := range out.Points {
		p := &out.Points[i]
		for c, t := range tallies[i] {
			p.Total += t.submitted
			p.CompletedWithinBudget += t.completed
			p.Escalated += t.escalated
			w := windowTally[c]
			if w == nil {
				w = &classTally{}
				windowTally[c] = w
				classes = append(classes, c)
			}
			w.submitted, w.completed, w.escalated, w.concluded = w.submitted+t.submitted, w.completed+t.completed, w.escalated+t.escalated, w.concluded+t.concluded
		}
		p.WithinBudgetRatio = ratioOrNil(p.CompletedWithinBudget, p.Total)
		b := budget(tallies[i], db.objective)
		p.Concluded, p.Missed = b.Concluded, b.Missed
		if b.Allowed > 0 {
			p.BurnRate = ptr(b.SpentRatio)
		}
		p.ErrorBudgetRemaining = budget(windowTally, db.objective).RemainingRatio
		p.LatencyMS = hists[i].percentiles()
	}
	if class != "" {
		out.Objective = db.objective(class)
	} else {
		out.Objective = combinedObjective(budget(windowTally, db.objective), db.classes(classes), db.objective)
	}
	return out, nil
}

// queueStaysSQL reads the stays in the manual queue that overlap a
// series, from $1 to $2, of class $3 (all when empty), in entry order.
// Once most stays have ended it finds the few it needs through the index
// on left_at, the open ones and those that ended after $1
// (TestQueueStaysReadTheIndexOnLeaving), rather than every stay that
// entered before $2.
const queueStaysSQL = `SELECT entered_at, left_at FROM slo_queue
	WHERE entered_at <= $2 AND (left_at IS NULL OR left_at > $1) AND ($3 = '' OR content_class = $3)
	ORDER BY entered_at`
