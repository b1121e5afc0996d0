package httpapi

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/reviewledger/reviewledger/api"
)

// openapi serves api.OpenAPI, the embedded api/openapi.json, as it is.
func (s *Server) openapi(c echo.Context) error {
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, api.OpenAPI)
}
