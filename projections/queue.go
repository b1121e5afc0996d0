package projections

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reviewledger/reviewledger/domain"
)

// queueProjection keeps manual_queue: the reviews in manual_review. Until a
// review escalates, manual_queue_candidate keeps what its queue entry will
// need from Submitted.
type queueProjection struct{}

func (queueProjection) name() string     { return ManualQueue }
func (queueProjection) version() int     { return 1 }
func (queueProjection) tables() []string { return []string{"manual_queue_candidate", "manual_queue"} }

type candidateRow struct {
	class             string
	priority          int
	requiredApprovals int
	humanGate         bool
}

type queueRow struct {
	class             string
	priority          int
	reason            string
	attempts          int
	escalatedAt       time.Time
	version           int64
	requiredApprovals int
	approvers         []string
}

// queueState is one review as this projection sees it: a candidate, an
// entry in the queue, or neither (ended).
type queueState struct {
	candidate *candidateRow
	entry     *queueRow
	// stored* say what the database held before the batch, so that only
	// rows that existed are deleted.
	storedCandidate, storedEntry bool
	changed                      bool
}

// uses: what makes, ends or moves a candidate or a queue entry. Attempts
// and conflicting completions never do.
func (queueProjection) uses(e event) bool {
	switch e.data.(type) {
	case domain.Submitted, domain.FindingReceived, domain.Escalated,
		domain.ManualApprovalRecorded, domain.ManualDecisionRecorded:
		return true
	}
	return false
}

func (p queueProjection) apply(ctx context.Context, tx pgx.Tx, t tableSet, events []event) error {
	need := queueNeeds(events)
	states, err := loadQueueStates(ctx, tx, t, need.candidates, need.entries)
	if err != nil {
		return err
	}
	var (
		order []string
		drops candidateDrops
	)
	for _, e := range events {
		s := states[e.reviewID]
		if s == nil {
			if _, ok := e.data.(domain.Submitted); !ok {
				drops.add(e) // nothing loaded: at most it ends a candidate
				continue
			}
			s = &queueState{}
			states[e.reviewID] = s
		}
		if s.entry != nil && int64(e.revision) <= s.entry.version {
			continue // already applied
		}
		if applyQueue(s, e) && !s.changed {
			s.changed = true
			order = append(order, e.reviewID)
		}
	}
	return writeQueue(ctx, tx, t, order, states, drops)
}

// queueLoads names the reviews whose stored rows a batch needs: the
// candidates of those it moves into the queue and the entries of those it
// approves or decides, unless the batch opens the review itself.
type queueLoads struct{ candidates, entries []string }

func queueNeeds(events []event) queueLoads {
	var (
		need               queueLoads
		opened, cand, entr = map[string]bool{}, map[string]bool{}, map[string]bool{}
	)
	for _, e := range events {
		id := e.reviewID
		switch d := e.data.(type) {
		case domain.Submitted: // a stream's first event: the batch holds the review's whole state
			opened[id] = true
		case domain.Escalated:
			if d.State == domain.StateManualReview && !opened[id] && !cand[id] {
				cand[id] = true
				need.candidates = append(need.candidates, id)
			}
		case domain.ManualApprovalRecorded, domain.ManualDecisionRecorded:
			if !opened[id] && !entr[id] {
				entr[id] = true
				need.entries = append(need.entries, id)
			}
		}
	}
	return need
}

// candidateDrops are the candidates a batch ends without having loaded
// them: a finding or a fail-closed escalation of a review whose candidate
// nothing later in the batch needs. The delete's condition does what
// applyQueue would do with the row: an accepted finding keeps the
// candidate of a human-gated review.
type candidateDrops struct {
	always, ungated []string
}

func (d *candidateDrops) add(e event) {
	switch x := e.data.(type) {
	case domain.FindingReceived:
		if x.State == domain.DecisionAccepted {
			d.ungated = append(d.ungated, e.reviewID)
		} else {
			d.always = append(d.always, e.reviewID)
		}
	case domain.Escalated:
		if x.State != domain.StateManualReview {
			d.always = append(d.always, e.reviewID)
		}
	}
}

// applyQueue moves s forward by e and reports whether anything changed.
func applyQueue(s *queueState, e event) bool {
	switch d := e.data.(type) {
	case domain.Submitted:
		if s.candidate != nil || s.entry != nil {
			return false
		}
		s.candidate = &candidateRow{
			class: d.ContentClass, priority: d.Policy.Priority,
			requiredApprovals: max(1, d.Policy.Approvals), humanGate: d.Policy.HumanGate,
		}
	case domain.FindingReceived:
		if s.candidate == nil || domain.HeldByGate(s.candidate.humanGate, d.State) {
			return false // an accept held by a human gate: Escalated follows
		}
		s.candidate = nil
	case domain.Escalated:
		c := s.candidate
		if c == nil {
			return false
		}
		s.candidate = nil
		if d.State == domain.StateManualReview {
			s.entry = &queueRow{
				class: c.class, priority: c.priority, reason: string(d.Reason), attempts: d.Attempts,
				escalatedAt: d.At, version: int64(e.revision), requiredApprovals: c.requiredApprovals,
				approvers: []string{},
			}
		}
	case domain.ManualApprovalRecorded:
		if s.entry == nil {
			return false
		}
		s.entry.approvers = append(slices.Clone(s.entry.approvers), d.Moderator)
		s.entry.version = int64(e.revision)
	case domain.ManualDecisionRecorded:
		if s.entry == nil {
			return false
		}
		s.entry = nil
	default:
		return false
	}
	return true
}

func loadQueueStates(ctx context.Context, tx pgx.Tx, t tableSet, candidates, entries []string) (map[string]*queueState, error) {
	out := make(map[string]*queueState, len(candidates)+len(entries))
	get := func(id string) *queueState {
		s := out[id]
		if s == nil {
			s = &queueState{}
			out[id] = s
		}
		return s
	}
	// Every review asked for has a state, found or not: the batch knows
	// what it holds.
	for _, id := range candidates {
		get(id)
	}
	for _, id := range entries {
		get(id)
	}
	var (
		id string
		c  candidateRow
		q  queueRow
	)
	if len(candidates) > 0 {
		rows, err := tx.Query(ctx, `SELECT review_id, content_class, priority, required_approvals, human_gate
			FROM `+t.name("manual_queue_candidate")+` WHERE review_id = ANY($1)`, candidates)
		if err != nil {
			return nil, dbErr(ctx, "load manual_queue_candidate", err)
		}
		_, err = pgx.ForEachRow(rows, []any{&id, &c.class, &c.priority, &c.requiredApprovals, &c.humanGate}, func() error {
			s := get(id)
			s.candidate, s.storedCandidate = ptr(c), true
			return nil
		})
		if err != nil {
			return nil, dbErr(ctx, "load manual_queue_candidate", err)
		}
	}
	if len(entries) > 0 {
		rows, err := tx.Query(ctx, `SELECT review_id, content_class, priority, reason, attempts, escalated_at, version,
			required_approvals, approvers FROM `+t.name("manual_queue")+` WHERE review_id = ANY($1)`, entries)
		if err != nil {
			return nil, dbErr(ctx, "load manual_queue", err)
		}
		_, err = pgx.ForEachRow(rows, []any{&id, &q.class, &q.priority, &q.reason, &q.attempts, &q.escalatedAt, &q.version,
			&q.requiredApprovals, &q.approvers}, func() error {
			s := get(id)
			s.entry, s.storedEntry = ptr(q), true
			q.approvers = nil // the next row scans into a slice of its own
			return nil
		})
		if err != nil {
			return nil, dbErr(ctx, "load manual_queue", err)
		}
	}
	return out, nil
}

func writeQueue(ctx context.Context, tx pgx.Tx, t tableSet, order []string, states map[string]*queueState, drops candidateDrops) error {
	var (
		dropCandidates, dropEntries []string
		cIDs, cClasses              []string
		cPriority, cRequired        []int32
		cGate                       []bool
		qIDs, qClasses, qReasons    []string
		qPriority, qAttempts, qReq  []int32
		qEscalated                  []time.Time
		qVersion                    []int64
		qApprovers                  []string
	)
	for _, id := range order {
		s := states[id]
		switch c := s.candidate; {
		case c != nil:
			cIDs, cClasses = append(cIDs, id), append(cClasses, c.class)
			cPriority, cRequired = append(cPriority, int32(c.priority)), append(cRequired, int32(c.requiredApprovals))
			cGate = append(cGate, c.humanGate)
		case s.storedCandidate:
			dropCandidates = append(dropCandidates, id)
		}
		switch q := s.entry; {
		case q != nil:
			qIDs, qClasses, qReasons = append(qIDs, id), append(qClasses, q.class), append(qReasons, q.reason)
			qPriority, qAttempts = append(qPriority, int32(q.priority)), append(qAttempts, int32(q.attempts))
			qReq, qEscalated = append(qReq, int32(q.requiredApprovals)), append(qEscalated, q.escalatedAt)
			qVersion = append(qVersion, q.version)
			qApprovers = append(qApprovers, textArray(q.approvers))
		case s.storedEntry:
			dropEntries = append(dropEntries, id)
		}
	}
	batch := &pgx.Batch{}
	if len(dropCandidates) > 0 {
		batch.Queue(`DELETE FROM `+t.name("manual_queue_candidate")+` WHERE review_id = ANY($1)`, dropCandidates)
	}
	if len(drops.always) > 0 {
		batch.Queue(`DELETE FROM `+t.name("manual_queue_candidate")+` WHERE review_id = ANY($1)`, drops.always)
	}
	if len(drops.ungated) > 0 {
		batch.Queue(`DELETE FROM `+t.name("manual_queue_candidate")+` WHERE review_id = ANY($1) AND NOT human_gate`, drops.ungated)
	}
	if len(dropEntries) > 0 {
		batch.Queue(`DELETE FROM `+t.name("manual_queue")+` WHERE review_id = ANY($1)`, dropEntries)
	}
	if len(cIDs) > 0 {
		batch.Queue(`INSERT INTO `+t.name("manual_queue_candidate")+` (review_id, content_class, priority, required_approvals, human_gate)
			SELECT * FROM unnest($1::text[], $2::text[], $3::int[], $4::int[], $5::bool[])
			ON CONFLICT (review_id) DO UPDATE SET content_class = EXCLUDED.content_class, priority = EXCLUDED.priority,
				required_approvals = EXCLUDED.required_approvals, human_gate = EXCLUDED.human_gate`,
			cIDs, cClasses, cPriority, cRequired, cGate)
	}
	if len(qIDs) > 0 {
		batch.Queue(`INSERT INTO `+t.name("manual_queue")+` (review_id, content_class, priority, reason, attempts,
				escalated_at, version, required_approvals, approvers)
			SELECT u.id, u.class, u.priority, u.reason, u.attempts, u.escalated_at, u.version, u.required, u.approvers::text[]
			FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::int[], $6::timestamptz[], $7::bigint[], $8::int[], $9::text[])
				AS u(id, class, priority, reason, attempts, escalated_at, version, required, approvers)
			ON CONFLICT (review_id) DO UPDATE SET content_class = EXCLUDED.content_class, priority = EXCLUDED.priority,
				reason = EXCLUDED.reason, attempts = EXCLUDED.attempts, escalated_at = EXCLUDED.escalated_at,
				version = EXCLUDED.version, required_approvals = EXCLUDED.required_approvals, approvers = EXCLUDED.approvers`,
			qIDs, qClasses, qPriority, qReasons, qAttempts, qEscalated, qVersion, qReq, qApprovers)
	}
	if batch.Len() == 0 {
		return nil
	}
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return dbErr(ctx, "write manual_queue", err)
	}
	return nil
}

// textArray returns the PostgreSQL literal of a text array, for passing a
// list per row through unnest (which would flatten a two-dimensional array).
func textArray(items []string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, s := range items {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		for _, r := range s {
			if r == '"' || r == '\\' {
				b.WriteByte('\\')
			}
			b.WriteRune(r)
		}
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}
