package api

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/reviewledger/reviewledger/domain"
)

// reviewView is the JSON of a review (GET /v1/reviews/{id}, submit,
// decision).
type reviewView struct {
	ReviewID     string     `json:"review_id"`
	State        string     `json:"state"`
	ContentClass string     `json:"content_class"`
	Attempts     int        `json:"attempts"`
	Version      uint64     `json:"version"`
	SubmittedAt  time.Time  `json:"submitted_at"`
	Deadline     time.Time  `json:"deadline"`
	DecidedAt    *time.Time `json:"decided_at"`
	Reasons      []string   `json:"reasons"`
}

func newReviewView(r *domain.Review) reviewView {
	v := reviewView{
		ReviewID:     r.ID(),
		State:        string(r.State()),
		ContentClass: r.Class(),
		Attempts:     r.Attempts(),
		Version:      r.Version(),
		SubmittedAt:  r.SubmittedAt().UTC(),
		Deadline:     r.Deadline().UTC(),
		Reasons:      r.Reasons(),
	}
	if v.Reasons == nil {
		v.Reasons = []string{}
	}
	if at := r.DecidedAt(); !at.IsZero() {
		at = at.UTC()
		v.DecidedAt = &at
	}
	return v
}

// getReview is GET /v1/reviews/{id}, read from the ledger so a client reads
// its own writes.
func (s *Server) getReview(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	rv, err := s.deps.Ledger.Load(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, newReviewView(rv.Review))
}

type eventView struct {
	Version    uint64          `json:"version"`
	Type       string          `json:"type"`
	RecordedAt time.Time       `json:"recorded_at"`
	Data       json.RawMessage `json:"data"`
}

type eventsView struct {
	ReviewID string      `json:"review_id"`
	Events   []eventView `json:"events"`
}

// getEvents is GET /v1/reviews/{id}/events: the stored event bodies in
// revision order.
func (s *Server) getEvents(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	h, err := s.deps.Ledger.History(c.Request().Context(), id)
	if err != nil {
		return err
	}
	v := eventsView{ReviewID: id, Events: make([]eventView, len(h.Events))}
	for i, e := range h.Events {
		v.Events[i] = eventView{Version: e.Revision, Type: e.Type, RecordedAt: e.RecordedAt.UTC(), Data: e.Data}
	}
	return c.JSON(http.StatusOK, v)
}
