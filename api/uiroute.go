package api

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
