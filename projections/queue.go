package projections

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/pgstore/pgarray"
	"github.com/reviewledger/reviewledger/eventstore/storeerr"
)

// queueProjection keeps manual_queue: the reviews in manual_review, with
// their claims, holds and due times. Until a review escalates,
// manual_queue_candidate keeps what its queue entry will need from
// Submitted (or from the entry a requeue ended). Version 2: claims and
// holds are ledger events kept in manual_queue, rounds and due times.
type queueProjection struct{}

func (queueProjection) name() string     { return ManualQueue }
func (queueProjection) version() int     { return 2 }
func (queueProjection) tables() []string { return []string{"manual_queue_candidate", "manual_queue"} }

type candidateRow struct {
	class             string
	priority          int
	requiredApprovals int
	humanGate         bool
	claims            string
	manualSLAMS       int64
	round             int
}

type queueRow struct {
	candidateRow
	reason      string
	attempts    int
	escalatedAt time.Time
	version     int64
	approvers   []string
	dueAt       *time.Time
	claim       *claimCols
	hold        *holdCols
}

type claimCols struct {
	by        string
	at, until time.Time
}

type holdCols struct {
	by, note string
	at       time.Time
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
		domain.ManualApprovalRecorded, domain.ManualDecisionRecorded,
		domain.Requeued, domain.Claimed, domain.ClaimReleased, domain.Held, domain.Unheld:
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
		case domain.ManualApprovalRecorded, domain.ManualDecisionRecorded,
			domain.Requeued, domain.Claimed, domain.ClaimReleased, domain.Held, domain.Unheld:
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
			claims: string(d.Policy.ClassPolicy().ClaimMode()), manualSLAMS: d.Policy.ManualSLAMS, round: 1,
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
				candidateRow: *c, reason: string(d.Reason), attempts: d.Attempts,
				escalatedAt: d.At, version: int64(e.revision), approvers: []string{},
			}
			if c.manualSLAMS > 0 {
				s.entry.dueAt = ptr(d.At.Add(time.Duration(c.manualSLAMS) * time.Millisecond))
			}
		}
	case domain.ManualDecisionRecorded:
		if s.entry == nil {
			return false
		}
		s.entry = nil
	case domain.Requeued:
		if s.entry == nil {
			return false
		}
		c := s.entry.candidateRow
		c.round = d.Round
		s.candidate, s.entry = &c, nil
	default:
		return applyQueueEntry(s.entry, e)
	}
	return true
}

// applyQueueEntry moves a queue entry forward by an event that keeps it in
// the queue: a vote, a claim or its end, a hold or its end.
func applyQueueEntry(q *queueRow, e event) bool {
	if q == nil {
		return false
	}
	switch d := e.data.(type) {
	case domain.ManualApprovalRecorded:
		q.approvers = append(slices.Clone(q.approvers), d.Moderator)
		if q.claim != nil && q.claim.by == d.Moderator {
			q.claim = nil
		}
	case domain.Claimed:
		since := d.ClaimedAt
		if q.claim != nil && q.claim.by == d.Moderator && q.claim.until.After(d.ClaimedAt) {
			since = q.claim.at // a renewal
		}
		q.claim = &claimCols{by: d.Moderator, at: since, until: d.ExpiresAt}
	case domain.ClaimReleased:
		q.claim = nil
	case domain.Held:
		q.hold = &holdCols{by: d.By, note: d.Note, at: d.At}
	case domain.Unheld:
		q.hold = nil
	default:
		return false
	}
	q.version = int64(e.revision)
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
	)
	if len(candidates) > 0 {
		rows, err := tx.Query(ctx, `SELECT review_id, content_class, priority, required_approvals, human_gate, claims, manual_sla_ms, round
			FROM `+t.name("manual_queue_candidate")+` WHERE review_id = ANY($1)`, candidates)
		if err != nil {
			return nil, storeerr.Wrap(ctx, "load manual_queue_candidate", err)
		}
		_, err = pgx.ForEachRow(rows, []any{&id, &c.class, &c.priority, &c.requiredApprovals, &c.humanGate, &c.claims, &c.manualSLAMS, &c.round}, func() error {
			s := get(id)
			s.candidate, s.storedCandidate = ptr(c), true
			return nil
		})
		if err != nil {
			return nil, storeerr.Wrap(ctx, "load manual_queue_candidate", err)
		}
	}
	if len(entries) > 0 {
		if err := loadEntries(ctx, tx, t, entries, get); err != nil {
			return nil, err
		}
	}
	return out, nil
}

const queueColumns = `review_id, content_class, priority, reason, attempts, escalated_at, version,
	required_approvals, approvers, human_gate, claims, manual_sla_ms, round, due_at,
	claimed_by, claimed_at, claim_expires_at, held_by, held_at, hold_note`

func loadEntries(ctx context.Context, tx pgx.Tx, t tableSet, entries []string, get func(string) *queueState) error {
	rows, err := tx.Query(ctx, `SELECT `+queueColumns+` FROM `+t.name("manual_queue")+` WHERE review_id = ANY($1)`, entries)
	if err != nil {
		return storeerr.Wrap(ctx, "load manual_queue", err)
	}
	var (
		id                     string
		q                      queueRow
		claimBy, holdBy, note  *string
		claimAt, until, heldAt *time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &q.class, &q.priority, &q.reason, &q.attempts, &q.escalatedAt, &q.version,
		&q.requiredApprovals, &q.approvers, &q.humanGate, &q.claims, &q.manualSLAMS, &q.round, &q.dueAt,
		&claimBy, &claimAt, &until, &holdBy, &heldAt, &note}, func() error {
		s := get(id)
		row := q
		if claimBy != nil && claimAt != nil && until != nil {
			row.claim = &claimCols{by: *claimBy, at: *claimAt, until: *until}
		}
		if holdBy != nil && heldAt != nil {
			row.hold = &holdCols{by: *holdBy, note: deref(note), at: *heldAt}
		}
		s.entry, s.storedEntry = &row, true
		q = queueRow{} // the next row scans into slices of its own
		return nil
	})
	if err != nil {
		return storeerr.Wrap(ctx, "load manual_queue", err)
	}
	return nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func writeQueue(ctx context.Context, tx pgx.Tx, t tableSet, order []string, states map[string]*queueState, drops candidateDrops) error {
	var (
		dropCandidates, dropEntries []string
		cand                        candidateCols
		entry                       entryCols
	)
	for _, id := range order {
		s := states[id]
		switch c := s.candidate; {
		case c != nil:
			cand.add(id, c)
		case s.storedCandidate:
			dropCandidates = append(dropCandidates, id)
		}
		switch q := s.entry; {
		case q != nil:
			entry.add(id, q)
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
	if len(cand.ids) > 0 {
		batch.Queue(`INSERT INTO `+t.name("manual_queue_candidate")+` (review_id, content_class, priority, required_approvals, human_gate,
				claims, manual_sla_ms, round)
			SELECT * FROM unnest($1::text[], $2::text[], $3::int[], $4::int[], $5::bool[], $6::text[], $7::bigint[], $8::int[])
			ON CONFLICT (review_id) DO UPDATE SET content_class = EXCLUDED.content_class, priority = EXCLUDED.priority,
				required_approvals = EXCLUDED.required_approvals, human_gate = EXCLUDED.human_gate,
				claims = EXCLUDED.claims, manual_sla_ms = EXCLUDED.manual_sla_ms, round = EXCLUDED.round`,
			cand.ids, cand.classes, cand.priority, cand.required, cand.gate, cand.claims, cand.sla, cand.round)
	}
	if len(entry.ids) > 0 {
		batch.Queue(`INSERT INTO `+t.name("manual_queue")+` (`+queueColumns+`)
			SELECT u.id, u.class, u.priority, u.reason, u.attempts, u.escalated_at, u.version, u.required, u.approvers::text[],
				u.gate, u.claims, u.sla, u.round, u.due_at, u.claimed_by, u.claimed_at, u.claim_expires_at, u.held_by, u.held_at, u.hold_note
			FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::int[], $6::timestamptz[], $7::bigint[], $8::int[], $9::text[],
				$10::bool[], $11::text[], $12::bigint[], $13::int[], $14::timestamptz[], $15::text[], $16::timestamptz[], $17::timestamptz[],
				$18::text[], $19::timestamptz[], $20::text[])
				AS u(id, class, priority, reason, attempts, escalated_at, version, required, approvers,
					gate, claims, sla, round, due_at, claimed_by, claimed_at, claim_expires_at, held_by, held_at, hold_note)
			ON CONFLICT (review_id) DO UPDATE SET content_class = EXCLUDED.content_class, priority = EXCLUDED.priority,
				reason = EXCLUDED.reason, attempts = EXCLUDED.attempts, escalated_at = EXCLUDED.escalated_at,
				version = EXCLUDED.version, required_approvals = EXCLUDED.required_approvals, approvers = EXCLUDED.approvers,
				human_gate = EXCLUDED.human_gate, claims = EXCLUDED.claims, manual_sla_ms = EXCLUDED.manual_sla_ms,
				round = EXCLUDED.round, due_at = EXCLUDED.due_at, claimed_by = EXCLUDED.claimed_by,
				claimed_at = EXCLUDED.claimed_at, claim_expires_at = EXCLUDED.claim_expires_at,
				held_by = EXCLUDED.held_by, held_at = EXCLUDED.held_at, hold_note = EXCLUDED.hold_note`,
			entry.args()...)
	}
	if batch.Len() == 0 {
		return nil
	}
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return storeerr.Wrap(ctx, "write manual_queue", err)
	}
	return nil
}

// candidateCols are candidate rows as columns, for unnest.
type candidateCols struct {
	ids, classes, claims      pgarray.Text
	priority, required, round pgarray.Int4
	gate                      []bool
	sla                       pgarray.Int8
}

func (c *candidateCols) add(id string, r *candidateRow) {
	c.ids, c.classes, c.claims = append(c.ids, id), append(c.classes, r.class), append(c.claims, r.claims)
	c.priority, c.required, c.round = append(c.priority, int32(r.priority)), append(c.required, int32(r.requiredApprovals)), append(c.round, int32(r.round))
	c.gate, c.sla = append(c.gate, r.humanGate), append(c.sla, r.manualSLAMS)
}

// entryCols are queue entries as columns, for unnest; nil pointers are
// NULLs.
type entryCols struct {
	candidateCols
	reasons, approvers               []string
	attempts                         []int32
	escalated                        []time.Time
	version                          []int64
	due, claimAt, claimUntil, heldAt []*time.Time
	claimBy, holdBy, holdNote        []*string
}

func (c *entryCols) add(id string, q *queueRow) {
	c.candidateCols.add(id, &q.candidateRow)
	c.reasons, c.approvers = append(c.reasons, q.reason), append(c.approvers, textArray(q.approvers))
	c.attempts, c.escalated, c.version = append(c.attempts, int32(q.attempts)), append(c.escalated, q.escalatedAt), append(c.version, q.version)
	c.due = append(c.due, q.dueAt)
	var (
		by, hb, note      *string
		at, until, heldAt *time.Time
	)
	if q.claim != nil {
		by, at, until = &q.claim.by, &q.claim.at, &q.claim.until
	}
	if q.hold != nil {
		hb, note, heldAt = &q.hold.by, &q.hold.note, &q.hold.at
	}
	c.claimBy, c.claimAt, c.claimUntil = append(c.claimBy, by), append(c.claimAt, at), append(c.claimUntil, until)
	c.holdBy, c.heldAt, c.holdNote = append(c.holdBy, hb), append(c.heldAt, heldAt), append(c.holdNote, note)
}

func (c *entryCols) args() []any {
	return []any{c.ids, c.classes, c.priority, c.reasons, c.attempts, c.escalated, c.version, c.required, c.approvers,
		c.gate, c.claims, c.sla, c.round, c.due, c.claimBy, c.claimAt, c.claimUntil, c.holdBy, c.heldAt, c.holdNote}
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
