package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/reviewledger/reviewledger/api/view"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

// Webhook event types: the body's "type". Types are only ever added.
const (
	// EventDecided: the review is accepted or rejected, by a finding, a
	// fail-closed escalation or a moderator. It is final.
	EventDecided = "review.decided"
	// EventManualReview: the review waits for a moderator; a
	// review.decided follows when one decides it.
	EventManualReview = "review.manual_review"
)

// Body is the JSON body of a webhook, shaped as the Standard Webhooks
// specification suggests: the event type, when the change was recorded in
// the ledger, and the review view as GET /v1/reviews/{id} showed it right
// after the change (its version is the revision of the event). It never
// holds content.
type Body struct {
	Type      string      `json:"type"`
	Timestamp time.Time   `json:"timestamp"`
	Data      view.Review `json:"data"`
}

// Histories reads reviews' histories (*ledger.Ledger).
type Histories interface {
	// History reads a review's stored events in revision order;
	// domain.ErrReviewNotFound when it has none.
	History(ctx context.Context, reviewID string) (*ledger.History, error)
}

var _ Histories = (*ledger.Ledger)(nil)

// eventType is the webhook a review's move from one state to another
// sends, or "" for none: reaching manual_review, and reaching a final
// state.
func eventType(from, to domain.State) string {
	if from == to {
		return ""
	}
	switch to {
	case domain.StateAccepted, domain.StateRejected:
		return EventDecided
	case domain.StateManualReview:
		return EventManualReview
	}
	return ""
}

// mayNotify reports whether an event of the type can move a review into
// manual_review or a final state: only those are looked at.
func mayNotify(typ string) bool {
	switch typ {
	case domain.TypeFindingReceived, domain.TypeEscalated, domain.TypeManualDecisionRecorded:
		return true
	}
	return false
}

// delivery is a webhook to create.
type delivery struct {
	id        string // the webhook-id: the ledger event's ID
	reviewID  string
	revision  uint64
	eventType string
	body      []byte
	createdAt time.Time // when the event was recorded
}

// candidate is a ledger event that may make a webhook.
type candidate struct {
	id         string
	recordedAt time.Time
}

// build returns the deliveries the recorded events make, in the order of
// the events. The events of each review that may make one are checked
// against its history, read once per review: the webhook goes out when
// the event moved the review into manual_review or a final state, with the
// review as it stood right after it.
func build(ctx context.Context, h Histories, recorded []eventstore.RecordedEvent) ([]delivery, error) {
	prefix := domain.StreamName("")
	var order []string
	cands := map[string]map[uint64]candidate{}
	for _, r := range recorded {
		id, ok := strings.CutPrefix(r.Stream, prefix)
		if !ok || !mayNotify(r.Type) {
			continue
		}
		if cands[id] == nil {
			cands[id] = map[uint64]candidate{}
			order = append(order, id)
		}
		cands[id][r.Revision] = candidate{id: r.ID, recordedAt: r.RecordedAt}
	}
	var out []delivery
	for _, id := range order {
		ds, err := reviewDeliveries(ctx, h, id, cands[id])
		if err != nil {
			return nil, err
		}
		out = append(out, ds...)
	}
	return out, nil
}

// reviewDeliveries replays one review's history and returns the
// deliveries its candidate events make.
func reviewDeliveries(ctx context.Context, h Histories, id string, cands map[uint64]candidate) ([]delivery, error) {
	hist, err := h.History(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("notify: history of review %q: %w", id, err)
	}
	r := &domain.Review{}
	var out []delivery
	found := 0
	for _, e := range hist.Events {
		from := r.State()
		if err := r.Apply(e.Revision, e.Event); err != nil {
			return nil, fmt.Errorf("notify: review %q: %w", id, err)
		}
		c, ok := cands[e.Revision]
		if !ok {
			continue
		}
		found++
		typ := eventType(from, r.State())
		if typ == "" {
			continue
		}
		body, err := json.Marshal(Body{Type: typ, Timestamp: c.recordedAt.UTC(), Data: view.NewReview(r)})
		if err != nil {
			return nil, fmt.Errorf("notify: encode the webhook of review %q revision %d: %w", id, e.Revision, err)
		}
		out = append(out, delivery{id: c.id, reviewID: id, revision: e.Revision, eventType: typ, body: body, createdAt: c.recordedAt})
		if found == len(cands) {
			break
		}
	}
	if found != len(cands) {
		return nil, fmt.Errorf("notify: review %q: %d events read from the global order are not in its history", id, len(cands)-found)
	}
	return out, nil
}
