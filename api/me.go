package api

import (
	"net/http"

	"github.com/labstack/echo/v4"
)

// meView is the body of GET /v1/me.
type meView struct {
	Name string `json:"name"`
	Role Role   `json:"role"`
}

// me is GET /v1/me: who the bearer token signs in as, so a client (the UI)
// offers only what the role may do. Any valid token; 401 otherwise.
func (s *Server) me(c echo.Context) error {
	t := principal(c)
	return c.JSON(http.StatusOK, meView{Name: t.Name, Role: t.Role})
}
