package projections

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/storeerr"
)

// providersProjection keeps the providers read model (migration 0060):
// per provider, content class and minute, the attempts each provider was
// sent and how they ended, the reviews whose first finding it gave, and
// for a shadow provider what its observations came to and how their
// findings compare with the review's first finding. Shadow observations
// are observations: they count here and nowhere else.
//
// A shadow's observation and the review's first finding may come in
// either order. provider_open keeps what the later one needs: a shadow
// finding waits (pending) for the review's first finding, and a closed
// review's row waits for the shadows its first attempt was sent to
// (awaiting) until ShadowHorizon of the ledger's time has passed; those
// that never came count as missing.
type providersProjection struct{}

// Providers names the providers projection.
const Providers = "providers"

// ShadowHorizon is how long after a review closed its shadows'
// observations are still compared with its finding: far longer than any
// shadow's timeout (at most the class's attempt timeout or its provider's
// timeout), so that only a shadow that was skipped, or lost with its
// process, counts as missing.
const ShadowHorizon = 10 * time.Minute

func (providersProjection) name() string { return Providers }

// version 2: the latency histograms one row each, not one row a bucket
// (migration 0061).
func (providersProjection) version() int { return 2 }
func (providersProjection) tables() []string {
	return []string{"provider_open", "provider_minute", "provider_latency", "provider_confusion"}
}

// uses: what routes, ends or observes an attempt, and what closes a
// review.
func (providersProjection) uses(e event) bool {
	switch d := e.data.(type) {
	case domain.Submitted, domain.AttemptStarted, domain.AttemptTimedOut, domain.FindingReceived,
		domain.ManualDecisionRecorded, domain.ShadowObserved:
		return true
	case domain.Escalated:
		return d.State != domain.StateManualReview
	}
	return false
}

// Latency kinds in provider_latency.
const (
	kindAttempt = "attempt"
	kindShadow  = "shadow"
)

// providerRow is a review's provider_open row.
type providerRow struct {
	class       string
	submittedAt time.Time
	deadline    time.Time
	humanGate   bool
	providers   []string
	awaiting    []string
	pending     []pendingShadow
	decided     domain.Decision // "" until the first finding
	closedAt    *time.Time
}

type pendingShadow struct {
	provider string
	state    domain.Decision
}

type providerState struct {
	row     *providerRow
	stored  bool // a provider_open row existed before the batch
	changed bool
}

type providerKey struct {
	minute          time.Time
	class, provider string
}

// providerCounts are provider_minute's counters.
type providerCounts struct {
	attempts, attemptFindings, attemptTimeouts, attemptFailures, attemptWithinBudget int64
	decided, decidedWithinBudget                                                     int64
	shadowObserved, shadowFindings, shadowTimeouts, shadowErrors, shadowMissing      int64
	shadowWithinBudget, compared, agreed                                             int64
}

type latencyKey struct {
	providerKey
	kind   string
	bucket int
}

type confusionKey struct {
	providerKey
	shadow, decided domain.Decision
}

// providerDelta is what one batch adds to the counters.
type providerDelta struct {
	counts    map[providerKey]*providerCounts
	latency   map[latencyKey]int64
	confusion map[confusionKey]int64
}

func newProviderDelta() *providerDelta {
	return &providerDelta{counts: map[providerKey]*providerCounts{}, latency: map[latencyKey]int64{}, confusion: map[confusionKey]int64{}}
}

func (d *providerDelta) at(t time.Time, class, provider string) *providerCounts {
	k := providerKey{minute(t), class, provider}
	c := d.counts[k]
	if c == nil {
		c = &providerCounts{}
		d.counts[k] = c
	}
	return c
}

// compare counts a shadow's finding against the review's first finding.
func (d *providerDelta) compare(r *providerRow, provider string, shadow domain.Decision) {
	c := d.at(r.submittedAt, r.class, provider)
	c.compared++
	if shadow == r.decided {
		c.agreed++
	}
	d.confusion[confusionKey{providerKey{minute(r.submittedAt), r.class, provider}, shadow, r.decided}]++
}

// missing counts the shadows a closed review still awaits as missing.
func (d *providerDelta) missing(r *providerRow) {
	for _, p := range r.awaiting {
		d.at(r.submittedAt, r.class, p).shadowMissing++
	}
}

func (p providersProjection) apply(ctx context.Context, tx pgx.Tx, t tableSet, events []event) error {
	// Only the reviews that were open before the batch have a row to load.
	var ids []string
	seen := make(map[string]bool)
	var last time.Time
	for _, e := range events {
		last = latest(last, e.recordedAt)
		if seen[e.reviewID] {
			continue
		}
		seen[e.reviewID] = true
		if _, opens := e.data.(domain.Submitted); !opens {
			ids = append(ids, e.reviewID)
		}
	}
	states, err := loadProviderOpen(ctx, tx, t, ids)
	if err != nil {
		return err
	}
	delta := newProviderDelta()
	var order []string
	for _, e := range events {
		s := states[e.reviewID]
		if s == nil {
			s = &providerState{}
			states[e.reviewID] = s
		}
		if applyProviders(s, e, delta) && !s.changed {
			s.changed = true
			order = append(order, e.reviewID)
		}
	}
	cutoff := last.Add(-ShadowHorizon)
	for _, id := range order {
		if r := states[id].row; r != nil && r.closedAt != nil && (len(r.awaiting) == 0 || r.closedAt.Before(cutoff)) {
			delta.missing(r)
			states[id].row = nil
		}
	}
	if err := writeProviderOpen(ctx, tx, t, order, states); err != nil {
		return err
	}
	if err := expireProviderOpen(ctx, tx, t, cutoff, delta); err != nil {
		return err
	}
	return writeProviderCounts(ctx, tx, t, delta)
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// applyProviders counts e into delta and moves s forward; it reports
// whether s's row changed.
func applyProviders(s *providerState, e event, delta *providerDelta) bool {
	if o, ok := e.data.(domain.ShadowObserved); ok {
		// Past its horizon a closed review's row is gone, whichever batch
		// this observation comes in.
		expired := s.row != nil && s.row.closedAt != nil && s.row.closedAt.Before(e.recordedAt.Add(-ShadowHorizon))
		if expired {
			delta.missing(s.row)
			s.row = nil
		}
		return observeShadow(s.row, o, delta) || expired
	}
	if d, ok := e.data.(domain.Submitted); ok {
		if s.row != nil {
			return false
		}
		s.row = &providerRow{class: d.ContentClass, submittedAt: d.SubmittedAt.Truncate(time.Microsecond),
			deadline: d.Deadline.Truncate(time.Microsecond), humanGate: d.Policy.HumanGate}
		return true
	}
	r := s.row
	if r == nil || r.closedAt != nil {
		return false // never seen, or its automated path ended
	}
	switch d := e.data.(type) {
	case domain.AttemptStarted:
		if len(r.providers) == 0 && d.Provider == "" && len(d.Shadows) == 0 {
			return false // the default provider's, as every attempt before it: nothing to keep
		}
		for len(r.providers) < d.Attempt-1 {
			r.providers = append(r.providers, domain.DefaultProvider)
		}
		r.providers = append(r.providers[:d.Attempt-1], d.ProviderName())
		if d.Attempt == 1 {
			r.awaiting = slices.Clone(d.Shadows)
		}
	case domain.AttemptTimedOut:
		c := delta.at(d.At, r.class, r.provider(d.Attempt))
		c.attempts++
		if d.Classification == domain.ClassDeadlineExceeded {
			c.attemptTimeouts++
		} else {
			c.attemptFailures++
		}
		return false
	case domain.FindingReceived:
		provider := r.provider(d.Attempt)
		c := delta.at(d.ReceivedAt, r.class, provider)
		c.attempts++
		c.attemptFindings++
		within := !d.ReceivedAt.After(r.deadline)
		if within {
			c.attemptWithinBudget++
		}
		delta.latency[latencyKey{providerKey{minute(d.ReceivedAt), r.class, provider}, kindAttempt, bucketOf(float64(d.ElapsedMS))}]++
		if r.decided == "" {
			r.decided = d.State
			cohort := delta.at(r.submittedAt, r.class, provider)
			cohort.decided++
			if within {
				cohort.decidedWithinBudget++
			}
			for _, ps := range r.pending {
				delta.compare(r, ps.provider, ps.state)
			}
			r.pending = nil
		}
		if !domain.HeldByGate(r.humanGate, d.State) {
			r.closedAt = ptr(e.recordedAt)
		}
	case domain.Escalated: // fail-closed (uses)
		r.closedAt = ptr(e.recordedAt)
	case domain.ManualDecisionRecorded:
		r.closedAt = ptr(e.recordedAt)
	default:
		return false
	}
	if r.closedAt != nil {
		r.pending = nil // never to be compared: no first finding is to come
	}
	return true
}

// observeShadow counts a shadow observation. r is the review's row, nil
// when it has none any more (its shadows' horizon passed) or never had.
func observeShadow(r *providerRow, o domain.ShadowObserved, delta *providerDelta) bool {
	cohort := o.StartedAt
	if r != nil {
		cohort = r.submittedAt
	}
	c := delta.at(cohort, o.ContentClass, o.Provider)
	c.shadowObserved++
	switch o.Outcome {
	case domain.ShadowFinding:
		c.shadowFindings++
		delta.latency[latencyKey{providerKey{minute(cohort), o.ContentClass, o.Provider}, kindShadow, bucketOf(float64(o.LatencyMS))}]++
	case domain.ShadowTimeout:
		c.shadowTimeouts++
	default:
		c.shadowErrors++
	}
	if r == nil {
		return false
	}
	i := slices.Index(r.awaiting, o.Provider)
	if i < 0 {
		return false // observed already, or not sent by this review's first attempt
	}
	r.awaiting = slices.Delete(r.awaiting, i, i+1)
	if o.Outcome != domain.ShadowFinding {
		return true
	}
	if !o.StartedAt.Add(time.Duration(o.LatencyMS) * time.Millisecond).After(r.deadline) {
		c.shadowWithinBudget++
	}
	switch {
	case r.decided != "":
		delta.compare(r, o.Provider, o.State)
	case r.closedAt == nil:
		r.pending = append(r.pending, pendingShadow{o.Provider, o.State})
	}
	return true
}

// provider returns the provider attempt n went to.
func (r *providerRow) provider(n int) string {
	if n < 1 || n > len(r.providers) {
		return domain.DefaultProvider
	}
	return r.providers[n-1]
}

func loadProviderOpen(ctx context.Context, tx pgx.Tx, t tableSet, ids []string) (map[string]*providerState, error) {
	out := make(map[string]*providerState, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := tx.Query(ctx, `SELECT review_id, content_class, submitted_at, deadline, human_gate, providers, awaiting, pending, decided, closed_at
		FROM `+t.name("provider_open")+` WHERE review_id = ANY($1)`, ids)
	if err != nil {
		return nil, storeerr.Wrap(ctx, "load provider_open", err)
	}
	var (
		id, providers, awaiting, pending string
		decided                          *string
		r                                providerRow
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &r.class, &r.submittedAt, &r.deadline, &r.humanGate, &providers, &awaiting, &pending, &decided, &r.closedAt}, func() error {
		row := r
		row.providers, row.awaiting, row.pending = splitNames(providers), splitNames(awaiting), splitPending(pending)
		if decided != nil {
			row.decided = domain.Decision(*decided)
		}
		out[id] = &providerState{row: &row, stored: true}
		return nil
	})
	if err != nil {
		return nil, storeerr.Wrap(ctx, "load provider_open", err)
	}
	return out, nil
}

func writeProviderOpen(ctx context.Context, tx pgx.Tx, t tableSet, order []string, states map[string]*providerState) error {
	var (
		drop, ids, classes, providers, awaiting, pending []string
		decided                                          []*string
		submitted, deadlines                             []time.Time
		closed                                           []*time.Time
		gates                                            []bool
	)
	for _, id := range order {
		s := states[id]
		switch r := s.row; {
		case r != nil:
			ids, classes, gates = append(ids, id), append(classes, r.class), append(gates, r.humanGate)
			submitted, deadlines = append(submitted, r.submittedAt), append(deadlines, r.deadline)
			providers, awaiting = append(providers, strings.Join(r.providers, ",")), append(awaiting, strings.Join(r.awaiting, ","))
			pending, closed = append(pending, joinPending(r.pending)), append(closed, r.closedAt)
			var d *string
			if r.decided != "" {
				d = ptr(string(r.decided))
			}
			decided = append(decided, d)
		case s.stored:
			drop = append(drop, id)
		}
	}
	batch := &pgx.Batch{}
	if len(drop) > 0 {
		batch.Queue(`DELETE FROM `+t.name("provider_open")+` WHERE review_id = ANY($1)`, drop)
	}
	if len(ids) > 0 {
		batch.Queue(`INSERT INTO `+t.name("provider_open")+` (review_id, content_class, submitted_at, deadline, human_gate, providers, awaiting, pending, decided, closed_at)
			SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::timestamptz[], $5::bool[], $6::text[], $7::text[], $8::text[], $9::text[], $10::timestamptz[])
			ON CONFLICT (review_id) DO UPDATE SET providers = EXCLUDED.providers, awaiting = EXCLUDED.awaiting,
				pending = EXCLUDED.pending, decided = EXCLUDED.decided, closed_at = EXCLUDED.closed_at`,
			ids, classes, submitted, deadlines, gates, providers, awaiting, pending, decided, closed)
	}
	if batch.Len() == 0 {
		return nil
	}
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return storeerr.Wrap(ctx, "write provider_open", err)
	}
	return nil
}

// expireProviderOpen deletes the rows of reviews closed before cutoff
// whose shadows never all came, counting those as missing.
func expireProviderOpen(ctx context.Context, tx pgx.Tx, t tableSet, cutoff time.Time, delta *providerDelta) error {
	rows, err := tx.Query(ctx, `DELETE FROM `+t.name("provider_open")+` WHERE closed_at < $1
		RETURNING content_class, submitted_at, awaiting`, cutoff)
	if err != nil {
		return storeerr.Wrap(ctx, "expire provider_open", err)
	}
	var (
		r        providerRow
		awaiting string
	)
	_, err = pgx.ForEachRow(rows, []any{&r.class, &r.submittedAt, &awaiting}, func() error {
		r.awaiting = splitNames(awaiting)
		delta.missing(&r)
		return nil
	})
	if err != nil {
		return storeerr.Wrap(ctx, "expire provider_open", err)
	}
	return nil
}

func writeProviderCounts(ctx context.Context, tx pgx.Tx, t tableSet, delta *providerDelta) error {
	batch := &pgx.Batch{}
	if n := len(delta.counts); n > 0 {
		var (
			ats     = make([]time.Time, 0, n)
			cls, ps = make([]string, 0, n), make([]string, 0, n)
			cols    [15][]int64
		)
		for k, c := range delta.counts {
			ats, cls, ps = append(ats, k.minute), append(cls, k.class), append(ps, k.provider)
			for i, f := range c.fields() {
				cols[i] = append(cols[i], *f.(*int64))
			}
		}
		args := []any{ats, cls, ps}
		for _, col := range cols {
			args = append(args, col)
		}
		batch.Queue(`INSERT INTO `+t.name("provider_minute")+` AS m (minute, content_class, provider, `+providerCountColumns+`)
			SELECT * FROM unnest($1::timestamptz[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[],
				$8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[], $12::bigint[], $13::bigint[], $14::bigint[], $15::bigint[],
				$16::bigint[], $17::bigint[], $18::bigint[])
			ON CONFLICT (minute, content_class, provider) DO UPDATE SET `+providerCountSums, args...)
	}
	if len(delta.latency) > 0 {
		var (
			ats            []time.Time
			cls, ps, kinds []string
			buckets        []int16
			ns             []int64
		)
		for k, n := range delta.latency {
			ats, cls, ps, kinds = append(ats, k.minute), append(cls, k.class), append(ps, k.provider), append(kinds, k.kind)
			buckets, ns = append(buckets, int16(k.bucket)), append(ns, n)
		}
		queueHistograms(batch, t.name("provider_latency"),
			[]histogramColumn{{"minute", "timestamptz"}, {"content_class", "text"}, {"provider", "text"}, {"kind", "text"}},
			[]any{ats, cls, ps, kinds}, buckets, ns)
	}
	if len(delta.confusion) > 0 {
		var (
			ats                      []time.Time
			cls, ps, shadow, decided []string
			ns                       []int64
		)
		for k, n := range delta.confusion {
			ats, cls, ps = append(ats, k.minute), append(cls, k.class), append(ps, k.provider)
			shadow, decided, ns = append(shadow, string(k.shadow)), append(decided, string(k.decided)), append(ns, n)
		}
		batch.Queue(`INSERT INTO `+t.name("provider_confusion")+` AS c (minute, content_class, provider, shadow_state, decided_state, n)
			SELECT * FROM unnest($1::timestamptz[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[])
			ON CONFLICT (minute, content_class, provider, shadow_state, decided_state) DO UPDATE SET n = c.n + EXCLUDED.n`,
			ats, cls, ps, shadow, decided, ns)
	}
	if batch.Len() == 0 {
		return nil
	}
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return storeerr.Wrap(ctx, "write provider counts", err)
	}
	return nil
}

// providerCountColumns are provider_minute's counters, in the order of
// providerCounts.values.
const providerCountColumns = `attempts, attempt_findings, attempt_timeouts, attempt_failures, attempt_within_budget,
	decided, decided_within_budget, shadow_observed, shadow_findings, shadow_timeouts, shadow_errors, shadow_missing,
	shadow_within_budget, compared, agreed`

// providerCountNames are providerCountColumns one by one.
func providerCountNames() []string {
	names := strings.Split(providerCountColumns, ",")
	for i, n := range names {
		names[i] = strings.TrimSpace(n)
	}
	return names
}

// providerCountSums adds each counter of an upsert to the stored one.
var providerCountSums = func() string {
	var sets []string
	for _, c := range providerCountNames() {
		sets = append(sets, c+" = m."+c+" + EXCLUDED."+c)
	}
	return strings.Join(sets, ", ")
}()

func splitNames(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func splitPending(s string) []pendingShadow {
	var out []pendingShadow
	for _, p := range splitNames(s) {
		name, state, _ := strings.Cut(p, "=")
		out = append(out, pendingShadow{name, domain.Decision(state)})
	}
	return out
}

func joinPending(ps []pendingShadow) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = p.provider + "=" + string(p.state)
	}
	return strings.Join(parts, ",")
}
