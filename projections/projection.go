package projections

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

// Projection names.
const (
	ReviewSummary = "review_summary"
	ManualQueue   = "manual_queue"
	SLO           = "slo"
)

// ErrUnknownProjection is returned for a projection name that does not exist.
var ErrUnknownProjection = errors.New("unknown projection")

// projection turns ledger events into rows.
type projection interface {
	// name is the projection's stable name, the key of its checkpoint.
	name() string
	// version changes whenever the rows the code writes for the same events
	// change; a stored checkpoint of another version triggers a rebuild.
	version() int
	// tables lists the tables the projection owns, rebuilt and swapped
	// together.
	tables() []string
	// uses reports whether e can change the projection's rows. Events it
	// does not use are never passed to apply: they cost the projection no
	// query at all, and its checkpoint moves over them with the batch.
	uses(e event) bool
	// apply applies events, in global order, inside tx to the tables named
	// through t. It is called once per batch, only with events it uses and
	// never with none; all reads and writes go through tx, and it loads only
	// the rows those events need.
	apply(ctx context.Context, tx pgx.Tx, t tableSet, events []event) error
}

// applyUsed applies to p, inside tx, the events of a batch that p uses
// and returns how many it used and how many it passed over. A batch it
// uses nothing of issues no statement.
func applyUsed(ctx context.Context, tx pgx.Tx, p projection, t tableSet, events []event) (used, ignored int, err error) {
	var mine []event
	for _, e := range events {
		if p.uses(e) {
			mine = append(mine, e)
		}
	}
	if len(mine) == 0 {
		return 0, len(events), nil
	}
	if err := p.apply(ctx, tx, t, mine); err != nil {
		return 0, 0, err
	}
	return len(mine), len(events) - len(mine), nil
}

// all returns every projection, in a fixed order.
func all() []projection {
	return []projection{summaryProjection{}, queueProjection{}, sloProjection{}, providersProjection{}}
}

// Names returns the names of every projection.
func Names() []string {
	var names []string
	for _, p := range all() {
		names = append(names, p.name())
	}
	return names
}

// Tables returns the tables of every projection, in a fixed order.
func Tables() []string {
	var tables []string
	for _, p := range all() {
		tables = append(tables, p.tables()...)
	}
	return tables
}

// lookup returns the named projections, or every one when names is empty.
func lookup(names ...string) ([]projection, error) {
	if len(names) == 0 {
		return all(), nil
	}
	var out []projection
	for _, n := range names {
		var found projection
		for _, p := range all() {
			if p.name() == n {
				found = p
			}
		}
		if found == nil {
			return nil, fmt.Errorf("projection %q (known: %s): %w", n, strings.Join(Names(), ", "), ErrUnknownProjection)
		}
		out = append(out, found)
	}
	return out, nil
}

// tableSet maps a projection's table names onto the physical tables of one
// generation: the live ones, or the ones a rebuild is filling.
type tableSet struct{ suffix string }

var (
	liveTables    = tableSet{}
	rebuildTables = tableSet{suffix: "_rebuild"}
)

// name returns the quoted physical name of table.
func (t tableSet) name(table string) string {
	return pgx.Identifier{table + t.suffix}.Sanitize()
}

// event is a decoded review event with its place in the ledger.
type event struct {
	position   eventstore.Position
	reviewID   string
	revision   uint64
	recordedAt time.Time
	data       domain.Event
}

// Stream name prefixes: review streams (domain.StreamName), conflict
// streams (domain.ConflictStreamName) and shadow streams
// (domain.ShadowStreamName).
const (
	streamPrefix   = "review-"
	conflictPrefix = "conflicts-"
	shadowPrefix   = "shadows-"
)

var knownTypes = map[string]bool{
	domain.TypeSubmitted:              true,
	domain.TypeAttemptStarted:         true,
	domain.TypeAttemptTimedOut:        true,
	domain.TypeFindingReceived:        true,
	domain.TypeEscalated:              true,
	domain.TypeManualApprovalRecorded: true,
	domain.TypeManualDecisionRecorded: true,
	domain.TypeRequeued:               true,
	domain.TypeClaimed:                true,
	domain.TypeClaimReleased:          true,
	domain.TypeHeld:                   true,
	domain.TypeUnheld:                 true,
}

// decode turns recorded events into review events: those of review
// streams, the conflicting completions of conflict streams and the
// observations of shadow streams. Events of
// other streams and of types this code does not know are skipped (and
// counted in skipped): they are not review facts this version can project.
// A Submitted that names its policy by digest gets it from policies.
// A known type whose body does not decode is an error: the projection stops
// rather than silently diverge from the ledger.
func decode(ctx context.Context, policies *ledger.Policies, recorded []eventstore.RecordedEvent) (events []event, skipped int, err error) {
	events = make([]event, 0, len(recorded))
	for _, r := range recorded {
		id, ok := strings.CutPrefix(r.Stream, streamPrefix)
		if ok {
			ok = knownTypes[r.Type]
		} else if id, ok = strings.CutPrefix(r.Stream, conflictPrefix); ok {
			ok = r.Type == domain.TypeConflictingCompletionRecorded
		} else if id, ok = strings.CutPrefix(r.Stream, shadowPrefix); ok {
			ok = r.Type == domain.TypeShadowObserved
		}
		if !ok {
			skipped++
			continue
		}
		e, err := policies.Decode(ctx, id, r.Type, r.Data)
		if err != nil {
			return nil, 0, fmt.Errorf("event %s at %s (%s revision %d): %w", r.ID, r.Position, r.Stream, r.Revision, err)
		}
		events = append(events, event{position: r.Position, reviewID: id, revision: r.Revision, recordedAt: r.RecordedAt, data: e})
	}
	return events, skipped, nil
}

// isSide reports whether e is an event of one of a review's side streams
// (a conflicting completion, a shadow observation), whose revision is not
// the review's.
func isSide(e event) bool {
	switch e.data.(type) {
	case domain.ConflictingCompletionRecorded, domain.ShadowObserved:
		return true
	}
	return false
}

// reviewIDs returns the reviews the events touch whose first event in the
// batch is not Submitted: those whose earlier state must be loaded.
func reviewIDs(events []event) []string {
	seen := make(map[string]bool)
	var ids []string
	for _, e := range events {
		if _, ok := seen[e.reviewID]; ok || isSide(e) {
			continue
		}
		_, opens := e.data.(domain.Submitted)
		seen[e.reviewID] = true
		if !opens {
			ids = append(ids, e.reviewID)
		}
	}
	return ids
}

// minute returns the SLO bucket of t.
func minute(t time.Time) time.Time { return t.UTC().Truncate(time.Minute) }
