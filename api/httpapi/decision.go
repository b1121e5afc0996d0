package httpapi

import (
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

// maxNoteLen bounds a moderator's note, in characters.
const maxNoteLen = 4000

type decisionBody struct {
	State           string  `json:"state"`
	Note            string  `json:"note"`
	ExpectedVersion *uint64 `json:"expected_version"`
}

// decodeDecision parses a decision body; errors name the field.
func decodeDecision(body []byte) (decisionBody, error) {
	var b decisionBody
	if err := decodeJSON(body, &b); err != nil {
		return b, err
	}
	switch {
	case b.ExpectedVersion == nil:
		return b, fieldError("expected_version", "is required: the review version the decision was made on")
	case !domain.Decision(b.State).Valid():
		return b, &domain.FieldError{Field: "state", Reason: `must be "accepted" or "rejected"`, Err: domain.ErrInvalidDecision}
	case utf8.RuneCountInString(b.Note) > maxNoteLen:
		return b, fieldError("note", fmt.Sprintf("longer than %d characters", maxNoteLen))
	}
	return b, nil
}

// decide is POST /v1/reviews/{id}/decision. The moderator is the token's
// name; the decision and note are recorded in the event and the actor in
// its metadata. On a four-eyes class the first moderators' votes are
// recorded as ManualApprovalRecorded until enough agree.
func (s *Server) decide(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	body, err := s.readBody(c)
	if err != nil {
		return err
	}
	d, err := decodeDecision(body)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	rv, err := s.deps.Ledger.Load(ctx, id)
	if err != nil {
		return err
	}
	ctx, span := s.startDecision(ctx, rv)
	var next *ledger.Snapshot
	defer func() { endDecision(span, next, err) }()
	decision := domain.ManualDecision{
		Moderator:       principal(c).Name,
		State:           domain.Decision(d.State),
		Note:            d.Note,
		ExpectedVersion: *d.ExpectedVersion,
	}
	// A claim, a release or a hold appended meanwhile moves the stream
	// but not what the moderator decides on: the decision is asked again
	// on the review as it then stands, and refused (409) only when the
	// review itself changed.
	next, _, err = s.commands.Coordinate(ctx, id, rv, actor(c), func(rv *ledger.Snapshot, now time.Time) (ledger.Step, error) {
		events, err := rv.DecideManually(decision, now)
		if err != nil {
			return ledger.Step{}, fmt.Errorf("decide review %q: %w", id, err)
		}
		return ledger.Step{Events: events}, nil
	})
	if err != nil {
		return err
	}
	outcome := "decided"
	if next.State() == domain.StateManualReview {
		outcome = "approval_recorded"
	}
	s.metrics.decisions.WithLabelValues(outcome).Inc()
	return c.JSON(http.StatusOK, newReviewView(next.Review))
}
