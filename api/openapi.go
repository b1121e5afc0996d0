package api

import (
	_ "embed"
	"net/http"

	"github.com/labstack/echo/v4"
)

// OpenAPI is the OpenAPI 3.1 document of every route, schema and error,
// served on /openapi.json. TestOpenAPIMatchesRoutes keeps it and the
// registered routes in step.
//
//go:embed openapi.json
var OpenAPI []byte

func (s *Server) openapi(c echo.Context) error {
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, OpenAPI)
}
