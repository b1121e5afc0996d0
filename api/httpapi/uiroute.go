package httpapi

import (
	"net/http"

	"github.com/labstack/echo/v4"
)

// uiRoute serves Deps.UI. The UI handler's own 404 and 405 answers (an
// unknown asset, GET /ui/, another method) are not written: they become
// ErrRouteNotFound and ErrMethodNotAllowed and so reach the client as
// problem+json like every other error. The headers the UI handler set
// (its security headers, Allow) stay on the answer.
func (s *Server) uiRoute(c echo.Context) error {
	w := &uiWriter{ResponseWriter: c.Response()}
	s.deps.UI.ServeHTTP(w, c.Request())
	switch w.refused {
	case http.StatusNotFound:
		return echo.ErrNotFound
	case http.StatusMethodNotAllowed:
		return echo.ErrMethodNotAllowed
	}
	return nil
}

// uiWriter holds back a 404 or 405 status and its body.
type uiWriter struct {
	http.ResponseWriter
	refused int
}

func (w *uiWriter) WriteHeader(code int) {
	if w.refused != 0 {
		return
	}
	if code == http.StatusNotFound || code == http.StatusMethodNotAllowed {
		w.refused = code
		return
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *uiWriter) Write(b []byte) (int, error) {
	if w.refused != 0 {
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *uiWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// headLikeGet serves a HEAD request with the GET route's handler: the same
// status and headers, and no body, whatever the handler writes.
func headLikeGet(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		res := c.Response()
		w := res.Writer
		res.Writer = bodyless{w}
		defer func() { res.Writer = w }()
		return next(c)
	}
}

// bodyless drops the body written to it.
type bodyless struct{ http.ResponseWriter }

func (bodyless) Write(b []byte) (int, error) { return len(b), nil }

// Unwrap lets http.ResponseController reach the connection.
func (w bodyless) Unwrap() http.ResponseWriter { return w.ResponseWriter }
