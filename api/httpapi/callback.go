package httpapi

import (
	"net/http"

	"github.com/labstack/echo/v4"
)

type callbackView struct {
	ReviewID string `json:"review_id"`
	Status   string `json:"status"`
}

// callback is POST /v1/reviews/{id}/findings: a provider's signed finding
// (docs/contracts.md §4). It carries no bearer token; the engine verifies the
// Standard Webhooks signature over the raw body and applies the finding
// with its expected-revision check. The signature is checked before
// anything else about the request, the review ID included.
func (s *Server) callback(c echo.Context) error {
	id := c.Param("id")
	body, err := s.readBody(c)
	if err != nil {
		return err
	}
	if err := s.deps.Reviews.HandleCallback(c.Request().Context(), id, c.Request().Header.Clone(), body); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, callbackView{ReviewID: id, Status: "applied"})
}
