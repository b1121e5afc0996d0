package httpapi

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/reviewledger/reviewledger/projections"
)

// Manual-queue limits (docs/contracts.md §2).
const (
	DefaultQueueLimit = 100
	MaxQueueLimit     = 1000
)

// classParam reads the optional content_class query parameter: 400 when
// it is too long, 422 unknown-class when Config.Classes is set and does not
// hold it.
func (s *Server) classParam(c echo.Context) (string, error) {
	class := c.QueryParam("content_class")
	return class, s.checkClass(class, "content_class")
}

// manualQueue is GET /v1/manual-queue, from the manual_queue projection.
// Query: content_class, limit, and the extensions held (false, true, any),
// reason and order (priority, due).
func (s *Server) manualQueue(c echo.Context) error {
	class, err := s.classParam(c)
	if err != nil {
		return err
	}
	q := projections.QueueQuery{Class: class, Limit: DefaultQueueLimit, Reason: c.QueryParam("reason"),
		Held: projections.HeldFilter(c.QueryParam("held")), Order: c.QueryParam("order")}
	if l := c.QueryParam("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > MaxQueueLimit {
			return fieldError("limit", fmt.Sprintf("must be an integer from 1 to %d, got %q", MaxQueueLimit, l))
		}
		q.Limit = n
	}
	switch {
	case q.Order == projections.OrderID:
		return fieldError("order", `must be "priority" or "due"`)
	case len(q.Reason) > 64:
		return fieldError("reason", "longer than 64 characters")
	}
	if s.deps.ReadModels == nil {
		return fmt.Errorf("manual queue: no read models configured: %w", ErrNotReady)
	}
	out, err := s.deps.ReadModels.ManualQueue(c.Request().Context(), q, s.cfg.Now())
	if err != nil {
		return err
	}
	if out.Items == nil {
		out.Items = []projections.QueueItem{}
	}
	return c.JSON(http.StatusOK, out)
}
