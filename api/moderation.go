package api

import (
	"errors"

	"github.com/labstack/echo/v4"
)

// ErrNotImplemented answers a documented route whose handler is not
// written yet.
var ErrNotImplemented = errors.New("not implemented yet")

// notImplemented stands in for the moderation-team routes until they are
// served.
func (s *Server) notImplemented(echo.Context) error { return ErrNotImplemented }
