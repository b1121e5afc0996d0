package projections

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/storeerr"
)

// sloProjection keeps the SLO buckets. Review outcomes count in the minute
// the review was submitted, so each minute is a cohort whose ratio is
// meaningful; attempts count in the minute they ended, and conflicting
// completions (ConflictingCompletionRecorded, from the reviews' conflict
// streams) in the minute they were refused. slo_open keeps, for
// every review not yet terminal, what later events need: class, submission
// time, deadline, and whether its outcome and completion were counted.
type sloProjection struct{}

func (sloProjection) name() string { return SLO }

// version 2: slo_conflict is counted from the ledger's conflict events
// (version 1 left it to direct writes). version 3: slo_queue records when
// reviews entered and left the manual queue. version 4: latencies and
// deadlines are counted from the submission in microseconds, as slo_open
// keeps it, in one batch as across batches (a latency on a bucket's bound
// was one bucket lower when its events came together).
//
// version 5: hourly rollups (slo_hour, slo_latency_hour, slo_attempt_hour,
// slo_conflict_hour) beside the minutes, which long windows read. version
// 6: the histograms one row each, not one row a bucket (migration 0027).
func (sloProjection) version() int { return 6 }
func (sloProjection) tables() []string {
	return []string{"slo_open", "slo_minute", "slo_latency", "slo_attempt", "slo_conflict", "slo_queue",
		"slo_hour", "slo_latency_hour", "slo_attempt_hour", "slo_conflict_hour"}
}

// uses: what opens, counts or ends a review's SLO figures. AttemptStarted
// counts nothing (an attempt counts when it ends) and an approval is not
// a decision.
func (sloProjection) uses(e event) bool {
	switch e.data.(type) {
	case domain.Submitted, domain.AttemptTimedOut, domain.FindingReceived, domain.Escalated,
		domain.ManualDecisionRecorded, domain.ConflictingCompletionRecorded, domain.Requeued:
		return true
	}
	return false
}

// Attempt outcomes in slo_attempt.
const (
	outcomeFinding = "finding"
	outcomeTimeout = "timeout" // classification deadline_exceeded
	outcomeFailure = "failure" // any other classification
)

type openRow struct {
	class           string
	submittedAt     time.Time
	deadline        time.Time
	humanGate       bool
	outcomeRecorded bool
	completed       bool
	// requeued: the review was sent back to the automated path. The SLO
	// counts a review's first stay in the queue: later escalations are
	// not counted again, and its stay ended with the requeue.
	requeued bool
}

type sloState struct {
	open    *openRow
	stored  bool // a slo_open row existed before the batch
	changed bool
}

type minuteKey struct {
	class  string
	minute time.Time
}

type minuteCounts struct{ submitted, completed, escalated int64 }

type bucketKey struct {
	class   string
	minute  time.Time
	outcome string // attempts only
	bucket  int
}

// sloDelta is what one batch adds to the counters.
type sloDelta struct {
	minutes   map[minuteKey]*minuteCounts
	latency   map[bucketKey]int64
	attempts  map[bucketKey]int64
	conflicts map[minuteKey]int64
	// queued are the reviews that entered the manual queue, left those a
	// moderator decided (after they entered, in the same batch or before).
	queued []queueEntry
	left   map[string]time.Time
	// sli collects the batch's Prometheus observations; nil in a rebuild.
	sli *sliBatch
}

type queueEntry struct {
	reviewID, class string
	at              time.Time
}

func (d *sloDelta) minute(class string, t time.Time) *minuteCounts {
	k := minuteKey{class, minute(t)}
	c := d.minutes[k]
	if c == nil {
		c = &minuteCounts{}
		d.minutes[k] = c
	}
	return c
}

func (p sloProjection) apply(ctx context.Context, tx pgx.Tx, t tableSet, events []event) error {
	states, err := loadOpen(ctx, tx, t, reviewIDs(events))
	if err != nil {
		return err
	}
	delta := &sloDelta{minutes: map[minuteKey]*minuteCounts{}, latency: map[bucketKey]int64{}, attempts: map[bucketKey]int64{},
		conflicts: map[minuteKey]int64{}, left: map[string]time.Time{}, sli: sliFrom(ctx)}
	var order []string
	for _, e := range events {
		if c, ok := e.data.(domain.ConflictingCompletionRecorded); ok {
			// Counted whatever the review's state: the event names its class.
			delta.conflicts[minuteKey{c.ContentClass, minute(c.At)}]++
			delta.sli.conflict(c.ContentClass)
			continue
		}
		s := states[e.reviewID]
		if s == nil {
			if _, ok := e.data.(domain.Submitted); !ok {
				continue // ended, or never seen: nothing left to count
			}
			s = &sloState{}
			states[e.reviewID] = s
		}
		if applySLO(s, e.reviewID, e, delta) && !s.changed {
			s.changed = true
			order = append(order, e.reviewID)
		}
	}
	return writeSLO(ctx, tx, t, order, states, delta)
}

// applySLO counts e into delta and moves s forward; it reports whether s
// changed.
func applySLO(s *sloState, reviewID string, e event, delta *sloDelta) bool {
	o := s.open
	if d, ok := e.data.(domain.Submitted); ok {
		if o != nil {
			return false
		}
		// In the microseconds slo_open keeps them in: a review whose later
		// events come in another batch is counted from the times read back
		// from it, and one whose events come together from the same times.
		s.open = &openRow{class: d.ContentClass, submittedAt: d.SubmittedAt.Truncate(time.Microsecond),
			deadline: d.Deadline.Truncate(time.Microsecond), humanGate: d.Policy.HumanGate}
		delta.minute(d.ContentClass, d.SubmittedAt).submitted++
		return true
	}
	if o == nil {
		return false
	}
	// outcome records the first move away from pending (a finding or an
	// escalation) in the latency histogram, and as the review's outcome
	// kind among the SLIs.
	outcome := func(at time.Time, kind string) {
		if !o.outcomeRecorded {
			o.outcomeRecorded = true
			delta.latency[bucketKey{class: o.class, minute: minute(o.submittedAt), bucket: bucketOf(ms(at.Sub(o.submittedAt)))}]++
			delta.sli.outcome(o.class, kind, o.submittedAt, o.deadline, at)
		}
	}
	// complete counts the review as completed within budget when at is not
	// after its deadline, once.
	complete := func(at time.Time) {
		if !o.completed && !at.After(o.deadline) {
			o.completed = true
			delta.minute(o.class, o.submittedAt).completed++
		}
	}
	attempt := func(outcome string, at time.Time, elapsedMS int64) {
		delta.attempts[bucketKey{class: o.class, minute: minute(at), outcome: outcome, bucket: bucketOf(float64(elapsedMS))}]++
		delta.sli.attempt(o.class, outcome, elapsedMS)
	}
	switch d := e.data.(type) {
	case domain.AttemptTimedOut:
		// Every classification but deadline_exceeded is a failure, those
		// this code does not know yet (a newer writer's) included.
		kind := outcomeFailure
		if d.Classification == domain.ClassDeadlineExceeded {
			kind = outcomeTimeout
		}
		attempt(kind, d.At, d.ElapsedMS)
		return false
	case domain.FindingReceived:
		attempt(outcomeFinding, d.ReceivedAt, d.ElapsedMS)
		outcome(d.ReceivedAt, string(d.State))
		complete(d.ReceivedAt)
		if !domain.HeldByGate(o.humanGate, d.State) {
			s.open = nil
		}
	case domain.Escalated:
		if o.requeued {
			if d.State != domain.StateManualReview {
				s.open = nil // a fail-closed end of a later round
			}
			return true
		}
		delta.minute(o.class, o.submittedAt).escalated++
		kind := OutcomeEscalated
		if d.State != domain.StateManualReview {
			kind = OutcomeFailedClosed
		}
		outcome(d.At, kind)
		if d.State != domain.StateManualReview {
			s.open = nil
		} else {
			delta.queued = append(delta.queued, queueEntry{reviewID: reviewID, class: o.class, at: d.At})
		}
	case domain.ManualDecisionRecorded:
		complete(d.At)
		if !o.requeued {
			delta.left[reviewID] = d.At
		}
		s.open = nil
	case domain.Requeued:
		if !o.requeued {
			o.requeued = true
			delta.left[reviewID] = d.At
		}
	default:
		return false
	}
	return true
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func loadOpen(ctx context.Context, tx pgx.Tx, t tableSet, ids []string) (map[string]*sloState, error) {
	out := make(map[string]*sloState, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := tx.Query(ctx, `SELECT review_id, content_class, submitted_at, deadline, human_gate, outcome_recorded, completed, requeued
		FROM `+t.name("slo_open")+` WHERE review_id = ANY($1)`, ids)
	if err != nil {
		return nil, storeerr.Wrap(ctx, "load slo_open", err)
	}
	var (
		id string
		o  openRow
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &o.class, &o.submittedAt, &o.deadline, &o.humanGate, &o.outcomeRecorded, &o.completed, &o.requeued}, func() error {
		out[id] = &sloState{open: ptr(o), stored: true}
		return nil
	})
	if err != nil {
		return nil, storeerr.Wrap(ctx, "load slo_open", err)
	}
	return out, nil
}

func writeSLO(ctx context.Context, tx pgx.Tx, t tableSet, order []string, states map[string]*sloState, delta *sloDelta) error {
	batch := &pgx.Batch{}
	var (
		drop, ids, classes   []string
		submitted, deadlines []time.Time
		gates, outs, dones   []bool
		requeued             []bool
	)
	for _, id := range order {
		s := states[id]
		switch o := s.open; {
		case o != nil:
			ids, classes = append(ids, id), append(classes, o.class)
			submitted, deadlines = append(submitted, o.submittedAt), append(deadlines, o.deadline)
			gates, outs, dones = append(gates, o.humanGate), append(outs, o.outcomeRecorded), append(dones, o.completed)
			requeued = append(requeued, o.requeued)
		case s.stored:
			drop = append(drop, id)
		}
	}
	if len(drop) > 0 {
		batch.Queue(`DELETE FROM `+t.name("slo_open")+` WHERE review_id = ANY($1)`, drop)
	}
	if len(ids) > 0 {
		batch.Queue(`INSERT INTO `+t.name("slo_open")+` (review_id, content_class, submitted_at, deadline, human_gate, outcome_recorded, completed, requeued)
			SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::timestamptz[], $5::bool[], $6::bool[], $7::bool[], $8::bool[])
			ON CONFLICT (review_id) DO UPDATE SET content_class = EXCLUDED.content_class, submitted_at = EXCLUDED.submitted_at,
				deadline = EXCLUDED.deadline, human_gate = EXCLUDED.human_gate,
				outcome_recorded = EXCLUDED.outcome_recorded, completed = EXCLUDED.completed, requeued = EXCLUDED.requeued`,
			ids, classes, submitted, deadlines, gates, outs, dones, requeued)
	}
	for _, g := range sloGrains {
		queueCounts(batch, t.name(g.minutes), g.col, g.roll(delta.minutes))
		queueBuckets(batch, t.name(g.latency), g.col, g.rollBuckets(delta.latency), false)
		queueBuckets(batch, t.name(g.attempts), g.col, g.rollBuckets(delta.attempts), true)
		queueConflicts(batch, t.name(g.conflicts), g.col, g.rollConflicts(delta.conflicts))
	}
	queueRows(batch, t, delta)
	if batch.Len() == 0 {
		return nil
	}
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return storeerr.Wrap(ctx, "write slo", err)
	}
	return nil
}

// sloGrain names the tables of one grain of the SLO counters: the
// minutes, and their hourly rollup (migration 0026), written in the same
// batch so that a window may read its whole hours from the one and its
// ragged ends from the other and get the minutes' sums exactly.
type sloGrain struct {
	col                                   string // the time column
	minutes, latency, attempts, conflicts string
	// at maps a minute to this grain's hour; nil for the minutes
	// themselves, whose counts are written as the batch made them.
	at func(time.Time) time.Time
}

var sloGrains = []sloGrain{
	{col: "minute", minutes: "slo_minute", latency: "slo_latency", attempts: "slo_attempt", conflicts: "slo_conflict"},
	{col: "hour", minutes: "slo_hour", latency: "slo_latency_hour", attempts: "slo_attempt_hour", conflicts: "slo_conflict_hour",
		at: func(t time.Time) time.Time { return t.Truncate(time.Hour) }},
}

func (g sloGrain) roll(m map[minuteKey]*minuteCounts) map[minuteKey]*minuteCounts {
	if g.at == nil {
		return m
	}
	out := make(map[minuteKey]*minuteCounts, len(m))
	for k, c := range m {
		k.minute = g.at(k.minute)
		o := out[k]
		if o == nil {
			o = &minuteCounts{}
			out[k] = o
		}
		o.submitted, o.completed, o.escalated = o.submitted+c.submitted, o.completed+c.completed, o.escalated+c.escalated
	}
	return out
}

func (g sloGrain) rollBuckets(m map[bucketKey]int64) map[bucketKey]int64 {
	if g.at == nil {
		return m
	}
	return rollCounts(m, func(k bucketKey) bucketKey { k.minute = g.at(k.minute); return k })
}

func (g sloGrain) rollConflicts(m map[minuteKey]int64) map[minuteKey]int64 {
	if g.at == nil {
		return m
	}
	return rollCounts(m, func(k minuteKey) minuteKey { k.minute = g.at(k.minute); return k })
}

// rollCounts sums the counts of m under the keys key maps them to.
func rollCounts[K comparable](m map[K]int64, key func(K) K) map[K]int64 {
	out := make(map[K]int64, len(m))
	for k, n := range m {
		out[key(k)] += n
	}
	return out
}

// queueCounts adds the cohort counts of m to table.
func queueCounts(batch *pgx.Batch, table, col string, m map[minuteKey]*minuteCounts) {
	if len(m) == 0 {
		return
	}
	var (
		cls              []string
		ats              []time.Time
		sub, comp, escal []int64
	)
	for k, c := range m {
		cls, ats = append(cls, k.class), append(ats, k.minute)
		sub, comp, escal = append(sub, c.submitted), append(comp, c.completed), append(escal, c.escalated)
	}
	batch.Queue(`INSERT INTO `+table+` AS m (content_class, `+col+`, submitted, completed_within_budget, escalated)
		SELECT * FROM unnest($1::text[], $2::timestamptz[], $3::bigint[], $4::bigint[], $5::bigint[])
		ON CONFLICT (content_class, `+col+`) DO UPDATE SET submitted = m.submitted + EXCLUDED.submitted,
			completed_within_budget = m.completed_within_budget + EXCLUDED.completed_within_budget,
			escalated = m.escalated + EXCLUDED.escalated`,
		cls, ats, sub, comp, escal)
}

// queueBuckets adds the histogram counts of m to table, by outcome when
// withOutcome (slo_attempt) and without (slo_latency).
func queueBuckets(batch *pgx.Batch, table, col string, m map[bucketKey]int64, withOutcome bool) {
	if len(m) == 0 {
		return
	}
	var (
		cls, outcomes []string
		ats           []time.Time
		buckets       []int16
		ns            []int64
	)
	for k, n := range m {
		cls, ats, outcomes = append(cls, k.class), append(ats, k.minute), append(outcomes, k.outcome)
		buckets, ns = append(buckets, int16(k.bucket)), append(ns, n)
	}
	cols, keys := []histogramColumn{{"content_class", "text"}, {col, "timestamptz"}}, []any{cls, ats}
	if withOutcome {
		cols, keys = append(cols, histogramColumn{"outcome", "text"}), append(keys, outcomes)
	}
	queueHistograms(batch, table, cols, keys, buckets, ns)
}

// queueConflicts adds the conflicting completions of m to table.
func queueConflicts(batch *pgx.Batch, table, col string, m map[minuteKey]int64) {
	if len(m) == 0 {
		return
	}
	var (
		cls []string
		ats []time.Time
		ns  []int64
	)
	for k, n := range m {
		cls, ats, ns = append(cls, k.class), append(ats, k.minute), append(ns, n)
	}
	batch.Queue(`INSERT INTO `+table+` AS c (content_class, `+col+`, n)
		SELECT * FROM unnest($1::text[], $2::timestamptz[], $3::bigint[])
		ON CONFLICT (content_class, `+col+`) DO UPDATE SET n = c.n + EXCLUDED.n`,
		cls, ats, ns)
}

// queueRows queues the writes of slo_queue: entries first, so that a
// review entering and leaving in one batch is written whole.
func queueRows(batch *pgx.Batch, t tableSet, delta *sloDelta) {
	if len(delta.queued) > 0 {
		var (
			ids, cls []string
			ats      []time.Time
		)
		for _, q := range delta.queued {
			ids, cls, ats = append(ids, q.reviewID), append(cls, q.class), append(ats, q.at)
		}
		batch.Queue(`INSERT INTO `+t.name("slo_queue")+` (review_id, content_class, entered_at)
			SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[]) ON CONFLICT (review_id) DO NOTHING`, ids, cls, ats)
	}
	if len(delta.left) > 0 {
		var (
			ids []string
			ats []time.Time
		)
		for id, at := range delta.left {
			ids, ats = append(ids, id), append(ats, at)
		}
		batch.Queue(`UPDATE `+t.name("slo_queue")+` q SET left_at = l.at
			FROM unnest($1::text[], $2::timestamptz[]) AS l(id, at) WHERE q.review_id = l.id`, ids, ats)
	}
}
