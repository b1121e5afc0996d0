package projections

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/storeerr"
)

// ProviderReport is the body of GET /v1/slo/providers: each provider's
// figures per content class over a window.
type ProviderReport struct {
	ContentClass string        `json:"content_class,omitempty"`
	Provider     string        `json:"provider,omitempty"`
	From         time.Time     `json:"from"`
	To           time.Time     `json:"to"`
	Providers    []ProviderSLO `json:"providers"`
}

// ProviderSLO is one provider's figures for one content class. Attempts
// count the calls it was sent as a deciding provider (in the minute they
// ended); Decided the reviews whose first finding it gave and Shadow its
// observations as a shadow provider (both by the review's submission).
type ProviderSLO struct {
	Provider            string          `json:"provider"`
	ContentClass        string          `json:"content_class"`
	Attempts            AttemptFigures  `json:"attempts"`
	Decided             int64           `json:"decided"`
	DecidedWithinBudget int64           `json:"decided_within_budget"`
	Shadow              ShadowFigures   `json:"shadow"`
	counts              *providerCounts `json:"-"`
}

// AttemptFigures are a provider's attempts: Total = Findings + Timeouts +
// Failures; WithinBudget the findings received at or before their
// review's deadline. The ratios are over Total, 0 without attempts;
// LatencyMS are percentiles of the time to its findings.
type AttemptFigures struct {
	Total             int64       `json:"total"`
	Findings          int64       `json:"findings"`
	Timeouts          int64       `json:"timeouts"`
	Failures          int64       `json:"failures"`
	WithinBudget      int64       `json:"within_budget"`
	WithinBudgetRatio float64     `json:"within_budget_ratio"`
	TimeoutRatio      float64     `json:"timeout_ratio"`
	FailureRatio      float64     `json:"failure_ratio"`
	LatencyMS         Percentiles `json:"latency_ms"`
}

// ShadowFigures are a shadow provider's observations: Observed = Findings
// + Timeouts + Errors; Missing the calls a first attempt recorded that
// never came (skipped, or lost with their process); WithinBudget the
// findings that came at or before their review's deadline. Compared counts
// the findings of reviews that got a finding of their own, Agreed those of
// the same state, and Confusion them by pair of states. The ratios are over
// Observed (AgreementRatio over Compared), 0 without any.
type ShadowFigures struct {
	Observed          int64           `json:"observed"`
	Findings          int64           `json:"findings"`
	Timeouts          int64           `json:"timeouts"`
	Errors            int64           `json:"errors"`
	Missing           int64           `json:"missing"`
	WithinBudget      int64           `json:"within_budget"`
	WithinBudgetRatio float64         `json:"within_budget_ratio"`
	TimeoutRatio      float64         `json:"timeout_ratio"`
	ErrorRatio        float64         `json:"error_ratio"`
	Compared          int64           `json:"compared"`
	Agreed            int64           `json:"agreed"`
	AgreementRatio    float64         `json:"agreement_ratio"`
	LatencyMS         Percentiles     `json:"latency_ms"`
	Confusion         []ConfusionCell `json:"confusion"`
}

// ConfusionCell counts the shadow's findings of state Shadow on reviews
// whose first finding was Decided.
type ConfusionCell struct {
	Shadow  domain.Decision `json:"shadow"`
	Decided domain.Decision `json:"decided"`
	Count   int64           `json:"count"`
}

// ProviderSLO returns the providers' figures for class and provider (all
// when empty) over the window ending at now, in whole minutes as SLO
// counts them. The providers come sorted by name, then class.
func (db *DB) ProviderSLO(ctx context.Context, window time.Duration, class, provider string, now time.Time) (ProviderReport, error) {
	return readFrom(ctx, db, func(db *DB) (ProviderReport, error) { return db.providerSLO(ctx, window, class, provider, now) })
}

func (db *DB) providerSLO(ctx context.Context, window time.Duration, class, provider string, now time.Time) (ProviderReport, error) {
	from, err := windowStart(window, now)
	if err != nil {
		return ProviderReport{}, err
	}
	out := ProviderReport{ContentClass: class, Provider: provider, From: from, To: now, Providers: []ProviderSLO{}}
	byKey := map[[2]string]*ProviderSLO{}
	hists := map[[3]string]*histogram{}
	get := func(c, p string) *ProviderSLO {
		s := byKey[[2]string{c, p}]
		if s == nil {
			s = &ProviderSLO{Provider: p, ContentClass: c, counts: &providerCounts{}, Shadow: ShadowFigures{Confusion: []ConfusionCell{}}}
			byKey[[2]string{c, p}] = s
		}
		return s
	}
	args := []any{from, now, class, provider}
	err = pgx.BeginTxFunc(ctx, db.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := scanProviderCounts(ctx, tx, args, func(c, p string, v *providerCounts) { *get(c, p).counts = *v }); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT content_class, provider, kind, bucket, sum(n)::bigint FROM `+histogramRows("provider_latency")+`
			WHERE `+providerWhere+` GROUP BY 1, 2, 3, 4`, args...)
		if err != nil {
			return err
		}
		var (
			c, p, kind string
			bucket     int16
			n          int64
		)
		if _, err := pgx.ForEachRow(rows, []any{&c, &p, &kind, &bucket, &n}, func() error {
			get(c, p)
			h := hists[[3]string{c, p, kind}]
			if h == nil {
				h = &histogram{}
				hists[[3]string{c, p, kind}] = h
			}
			if bucket >= 0 && int(bucket) < numBuckets {
				h[bucket] += n
			}
			return nil
		}); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `SELECT content_class, provider, shadow_state, decided_state, sum(n)::bigint FROM provider_confusion
			WHERE `+providerWhere+` GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4`, args...)
		if err != nil {
			return err
		}
		var cell ConfusionCell
		_, err = pgx.ForEachRow(rows, []any{&c, &p, &cell.Shadow, &cell.Decided, &cell.Count}, func() error {
			s := get(c, p)
			s.Shadow.Confusion = append(s.Shadow.Confusion, cell)
			return nil
		})
		return err
	})
	if err != nil {
		return ProviderReport{}, storeerr.Wrap(ctx, "provider slo", err)
	}
	for k, s := range byKey {
		s.fill(hists[[3]string{k[0], k[1], kindAttempt}], hists[[3]string{k[0], k[1], kindShadow}])
		out.Providers = append(out.Providers, *s)
	}
	slices.SortFunc(out.Providers, func(a, b ProviderSLO) int {
		return cmp.Or(cmp.Compare(a.Provider, b.Provider), cmp.Compare(a.ContentClass, b.ContentClass))
	})
	return out, nil
}

// providerWhere selects the rows of a window ($1, $2), a class ($3) and
// a provider ($4), each "" for all.
const providerWhere = `minute >= $1 AND minute <= $2 AND ($3 = '' OR content_class = $3) AND ($4 = '' OR provider = $4)`

// scanProviderCounts sums provider_minute over args (providerWhere) per
// class and provider, and passes each sum to f.
func scanProviderCounts(ctx context.Context, tx pgx.Tx, args []any, f func(class, provider string, v *providerCounts)) error {
	rows, err := tx.Query(ctx, `SELECT content_class, provider, `+providerCountTotals+` FROM provider_minute
		WHERE `+providerWhere+` GROUP BY 1, 2`, args...)
	if err != nil {
		return err
	}
	var (
		c, p string
		v    providerCounts
	)
	dest := append([]any{&c, &p}, v.fields()...)
	_, err = pgx.ForEachRow(rows, dest, func() error {
		f(c, p, &v)
		return nil
	})
	return err
}

// providerCountTotals sums each of provider_minute's counters.
var providerCountTotals = func() string {
	var sums []string
	for _, c := range providerCountNames() {
		sums = append(sums, "sum("+c+")::bigint")
	}
	return strings.Join(sums, ", ")
}()

// fields are pointers to c's counters, in the order of
// providerCountColumns.
func (c *providerCounts) fields() []any {
	return []any{&c.attempts, &c.attemptFindings, &c.attemptTimeouts, &c.attemptFailures, &c.attemptWithinBudget,
		&c.decided, &c.decidedWithinBudget, &c.shadowObserved, &c.shadowFindings, &c.shadowTimeouts, &c.shadowErrors, &c.shadowMissing,
		&c.shadowWithinBudget, &c.compared, &c.agreed}
}

// fill sets s's figures from its counters and histograms (nil when none).
func (s *ProviderSLO) fill(attempts, shadows *histogram) {
	c := s.counts
	s.Attempts = AttemptFigures{Total: c.attempts, Findings: c.attemptFindings, Timeouts: c.attemptTimeouts,
		Failures: c.attemptFailures, WithinBudget: c.attemptWithinBudget,
		WithinBudgetRatio: ratio(c.attemptWithinBudget, c.attempts), TimeoutRatio: ratio(c.attemptTimeouts, c.attempts),
		FailureRatio: ratio(c.attemptFailures, c.attempts), LatencyMS: attempts.percentiles()}
	s.Decided, s.DecidedWithinBudget = c.decided, c.decidedWithinBudget
	sh := &s.Shadow
	sh.Observed, sh.Findings, sh.Timeouts, sh.Errors, sh.Missing = c.shadowObserved, c.shadowFindings, c.shadowTimeouts, c.shadowErrors, c.shadowMissing
	sh.WithinBudget, sh.Compared, sh.Agreed = c.shadowWithinBudget, c.compared, c.agreed
	sh.WithinBudgetRatio, sh.TimeoutRatio, sh.ErrorRatio = ratio(c.shadowWithinBudget, c.shadowObserved), ratio(c.shadowTimeouts, c.shadowObserved), ratio(c.shadowErrors, c.shadowObserved)
	sh.AgreementRatio = ratio(c.agreed, c.compared)
	sh.LatencyMS = shadows.percentiles()
}

// ProviderSeries is the body of GET /v1/slo/providers/series: each
// provider's figures per content class, step by step.
type ProviderSeries struct {
	ContentClass string               `json:"content_class,omitempty"`
	Provider     string               `json:"provider,omitempty"`
	From         time.Time            `json:"from"`
	To           time.Time            `json:"to"`
	StepSeconds  int64                `json:"step_seconds"`
	Providers    []ProviderSeriesLine `json:"providers"`
}

// ProviderSeriesLine is one provider's steps for one content class.
type ProviderSeriesLine struct {
	Provider     string                `json:"provider"`
	ContentClass string                `json:"content_class"`
	Points       []ProviderSeriesPoint `json:"points"`
}

// ProviderSeriesPoint is one step, [From, To), counted as in
// ProviderSLO. Ratios are null without anything to compute them from.
type ProviderSeriesPoint struct {
	From                    time.Time `json:"from"`
	To                      time.Time `json:"to"`
	Attempts                int64     `json:"attempts"`
	AttemptWithinBudget     int64     `json:"attempt_within_budget"`
	WithinBudgetRatio       *float64  `json:"within_budget_ratio"`
	ShadowObserved          int64     `json:"shadow_observed"`
	ShadowWithinBudget      int64     `json:"shadow_within_budget"`
	ShadowWithinBudgetRatio *float64  `json:"shadow_within_budget_ratio"`
	Compared                int64     `json:"compared"`
	Agreed                  int64     `json:"agreed"`
	AgreementRatio          *float64  `json:"agreement_ratio"`
}

// ProviderSeries returns the providers' figures for class and provider
// (all when empty) over the window ending at now in steps of step, as
// SLOSeries steps.
func (db *DB) ProviderSeries(ctx context.Context, window, step time.Duration, class, provider string, now time.Time) (ProviderSeries, error) {
	return readFrom(ctx, db, func(db *DB) (ProviderSeries, error) {
		return db.providerSeries(ctx, window, step, class, provider, now)
	})
}

func (db *DB) providerSeries(ctx context.Context, window, step time.Duration, class, provider string, now time.Time) (ProviderSeries, error) {
	from, n, err := seriesRange(window, step, now)
	if err != nil {
		return ProviderSeries{}, err
	}
	to := from.Add(time.Duration(n) * step)
	out := ProviderSeries{ContentClass: class, Provider: provider, From: from, To: to, StepSeconds: int64(step / time.Second),
		Providers: []ProviderSeriesLine{}}
	lines := map[[2]string]*ProviderSeriesLine{}
	rows, err := db.pool.Query(ctx, `SELECT content_class, provider, minute, attempts, attempt_within_budget,
			shadow_observed, shadow_within_budget, compared, agreed
		FROM provider_minute WHERE minute >= $1 AND minute < $2 AND ($3 = '' OR content_class = $3) AND ($4 = '' OR provider = $4)`,
		from, to, class, provider)
	if err != nil {
		return ProviderSeries{}, storeerr.Wrap(ctx, "provider series", err)
	}
	var (
		c, p string
		at   time.Time
		v    ProviderSeriesPoint
	)
	_, err = pgx.ForEachRow(rows, []any{&c, &p, &at, &v.Attempts, &v.AttemptWithinBudget, &v.ShadowObserved, &v.ShadowWithinBudget, &v.Compared, &v.Agreed}, func() error {
		l := lines[[2]string{c, p}]
		if l == nil {
			l = &ProviderSeriesLine{Provider: p, ContentClass: c, Points: make([]ProviderSeriesPoint, n)}
			for i := range l.Points {
				l.Points[i].From, l.Points[i].To = from.Add(time.Duration(i)*step), from.Add(time.Duration(i+1)*step)
			}
			lines[[2]string{c, p}] = l
		}
		pt := &l.Points[int(at.Sub(from)/step)]
		pt.Attempts, pt.AttemptWithinBudget = pt.Attempts+v.Attempts, pt.AttemptWithinBudget+v.AttemptWithinBudget
		pt.ShadowObserved, pt.ShadowWithinBudget = pt.ShadowObserved+v.ShadowObserved, pt.ShadowWithinBudget+v.ShadowWithinBudget
		pt.Compared, pt.Agreed = pt.Compared+v.Compared, pt.Agreed+v.Agreed
		return nil
	})
	if err != nil {
		return ProviderSeries{}, storeerr.Wrap(ctx, "provider series", err)
	}
	for _, l := range lines {
		for i := range l.Points {
			pt := &l.Points[i]
			pt.WithinBudgetRatio = ratioOrNil(pt.AttemptWithinBudget, pt.Attempts)
			pt.ShadowWithinBudgetRatio = ratioOrNil(pt.ShadowWithinBudget, pt.ShadowObserved)
			pt.AgreementRatio = ratioOrNil(pt.Agreed, pt.Compared)
		}
		out.Providers = append(out.Providers, *l)
	}
	slices.SortFunc(out.Providers, func(a, b ProviderSeriesLine) int {
		return cmp.Or(cmp.Compare(a.Provider, b.Provider), cmp.Compare(a.ContentClass, b.ContentClass))
	})
	return out, nil
}
