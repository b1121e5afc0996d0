package httpapi

import (
	"net/http"

	"github.com/labstack/echo/v4"
)

// meView is the body of GET /v1/me.
type meView struct {
	Name string `json:"name"`
	Role Role   `json:"role"`
	// For a user of the OpenID Provider: the provider's subject and
	// display name, every role the claims map to, and how the request
	// authenticated (jwt or session).
	Subject     string `json:"subject,omitempty"`
	DisplayName string `json:"display_name,omitempty"`
	Roles       []Role `json:"roles,omitempty"`
	Via         string `json:"via,omitempty"`
}

// me is GET /v1/me: who the bearer token signs in as, so a client (the UI)
// offers only what the role may do. Any valid token; 401 otherwise.
func (s *Server) me(c echo.Context) error {
	p := principal(c)
	v := meView{Name: p.Name, Role: p.Role}
	if p.Via != ViaToken {
		v.Subject, v.DisplayName, v.Roles, v.Via = p.Subject, p.DisplayName, p.Roles, p.Via
	}
	return c.JSON(http.StatusOK, v)
}
