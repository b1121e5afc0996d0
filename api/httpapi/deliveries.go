package httpapi

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/reviewledger/reviewledger/api/notify"
)

// deliveriesView is the body of GET /v1/admin/deliveries.
type deliveriesView struct {
	Deliveries []notify.Delivery `json:"deliveries"`
}

// listDeliveries is GET /v1/admin/deliveries: the decision webhooks' deliveries,
// oldest first, selected by state (failing: retrying or given up),
// review_id and limit.
func (s *Server) listDeliveries(c echo.Context) error {
	q := notify.Query{State: c.QueryParam("state"), ReviewID: c.QueryParam("review_id")}
	if l := c.QueryParam("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > notify.MaxLimit {
			return fieldError("limit", fmt.Sprintf("must be an integer from 1 to %d, got %q", notify.MaxLimit, l))
		}
		q.Limit = n
	}
	if err := q.Validate(); err != nil {
		return err
	}
	if s.deps.Deliveries == nil {
		return fmt.Errorf("deliveries: none configured: %w", ErrNotReady)
	}
	ds, err := s.deps.Deliveries.List(c.Request().Context(), q)
	if err != nil {
		return err
	}
	if ds == nil {
		ds = []notify.Delivery{}
	}
	return c.JSON(http.StatusOK, deliveriesView{Deliveries: ds})
}

// redeliver is POST /v1/admin/deliveries/{id}/redeliver: the delivery is
// attempted again at once, with a new retry window and the same
// webhook-id, whatever its state.
func (s *Server) redeliver(c echo.Context) error {
	id := c.Param("id")
	if id == "" || len(id) > 128 {
		return fieldError("id", "must be a delivery ID of 1 to 128 characters")
	}
	if s.deps.Deliveries == nil {
		return fmt.Errorf("deliveries: none configured: %w", ErrNotReady)
	}
	d, err := s.deps.Deliveries.Redeliver(c.Request().Context(), id, s.cfg.Now())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, d)
}
