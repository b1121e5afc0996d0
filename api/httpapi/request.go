package httpapi

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

const requestIDKey = "reviewledger.request_id"

// requestID takes the caller's X-Request-Id when it is a plausible ID (the
// review ID alphabet, at most 128 characters) and makes one otherwise. It
// is echoed in the X-Request-Id header, problem bodies, logs and the
// metadata of the events the request causes.
func (s *Server) requestID(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		id := c.Request().Header.Get(echo.HeaderXRequestID)
		if domain.ValidateReviewID(id) != nil {
			id = uuid.NewString()
		}
		c.Set(requestIDKey, id)
		c.Response().Header().Set(echo.HeaderXRequestID, id)
		return next(c)
	}
}

func requestID(c echo.Context) string {
	id, _ := c.Get(requestIDKey).(string)
	return id
}

// observe logs and counts every request. It logs the route pattern, never
// the Authorization header or a body.
func (s *Server) observe(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := s.cfg.Now()
		err := next(c)
		if err != nil {
			c.Error(err)
		}
		route := c.Path()
		if route == "" || route == "/*" {
			route = "unmatched"
		}
		status := c.Response().Status
		elapsed := s.cfg.Now().Sub(start)
		s.metrics.observe(route, methodLabel(c.Request().Method), status, elapsed.Seconds())
		s.log.LogAttrs(c.Request().Context(), slog.LevelInfo, "http request",
			slog.String("request_id", requestID(c)),
			slog.String("method", c.Request().Method),
			slog.String("route", route),
			slog.Int("status", status),
			slog.Float64("elapsed_ms", float64(elapsed.Microseconds())/1000),
			slog.String("actor", principal(c).Name))
		return nil
	}
}

// recover turns a panic into an error (a generic 500) and logs it with
// its stack and the request ID.
func (s *Server) recover(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		defer func() {
			if r := recover(); r != nil {
				if err, ok := r.(error); ok && errors.Is(err, http.ErrAbortHandler) {
					panic(r)
				}
				s.log.ErrorContext(c.Request().Context(), "panic serving request",
					slog.String("request_id", requestID(c)), slog.Any("panic", r), slog.String("stack", string(debug.Stack())))
				err = fmt.Errorf("panic: %v", r)
			}
		}()
		return next(c)
	}
}

// methodLabel bounds the method label to the standard methods, so a client
// cannot grow the metrics without limit.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "other"
}

// actor is who the events a request causes are recorded as.
func actor(c echo.Context) ledger.Actor {
	return ledger.Actor{Name: principal(c).Name, RequestID: requestID(c)}
}

// readBody reads the whole body, refusing more than Config.MaxBodyBytes
// before anything is decoded: a declared Content-Length over the limit is
// refused unread, and http.MaxBytesReader stops a longer stream.
func (s *Server) readBody(c echo.Context) ([]byte, error) {
	r := c.Request()
	limit := s.cfg.MaxBodyBytes
	if r.ContentLength > limit {
		return nil, fmt.Errorf("body of %d bytes is over the limit of %d: %w", r.ContentLength, limit, ErrBodyTooLarge)
	}
	body, err := io.ReadAll(http.MaxBytesReader(c.Response(), r.Body, limit))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return nil, fmt.Errorf("body is over the limit of %d bytes: %w", limit, ErrBodyTooLarge)
	}
	if err != nil {
		return nil, fmt.Errorf("read body: %v: %w", err, ErrInvalidRequest)
	}
	return body, nil
}

// pathID is the review ID in the path, validated.
func pathID(c echo.Context) (string, error) {
	id := c.Param("id")
	if err := domain.ValidateReviewID(id); err != nil {
		return "", err
	}
	return id, nil
}

// fieldError is a 400 naming a field.
func fieldError(field, reason string) error {
	return &domain.FieldError{Field: field, Reason: reason, Err: ErrInvalidRequest}
}
