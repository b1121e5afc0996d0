package client

import (
	"errors"
	"fmt"
	"net/http"
)

// Kinds of failure an *Error matches with errors.Is.
var (
	// ErrNotFound: no such review (404).
	ErrNotFound = errors.New("not found")
	// ErrConflict: the review exists with other content or class, or
	// moved on (409).
	ErrConflict = errors.New("conflict")
	// ErrInvalid: the request was refused as malformed (400, 413) or the
	// content class is unknown (422); Error.Field names the field.
	ErrInvalid = errors.New("invalid request")
	// ErrUnauthorized: the token is missing or unknown (401), or its role
	// may not do this (403).
	ErrUnauthorized = errors.New("unauthorized")
	// ErrUnavailable: reviewledger could not answer (429, 502, 503, 504)
	// as often as the client retried.
	ErrUnavailable = errors.New("unavailable")
)

// Error is an answer that is not a success: the server's RFC 9457
// problem body.
type Error struct {
	Status    int    `json:"status"`
	Type      string `json:"type"`
	Title     string `json:"title"`
	Detail    string `json:"detail"`
	Field     string `json:"field"`
	RequestID string `json:"request_id"`
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("reviewledger: HTTP %d", e.Status)
	if e.Title != "" {
		msg += " " + e.Title
	}
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	if e.RequestID != "" {
		msg += " (request " + e.RequestID + ")"
	}
	return msg
}

// Is matches the kind of failure the status says.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrNotFound:
		return e.Status == http.StatusNotFound
	case ErrConflict:
		return e.Status == http.StatusConflict
	case ErrInvalid:
		return e.Status == http.StatusBadRequest || e.Status == http.StatusRequestEntityTooLarge || e.Status == http.StatusUnprocessableEntity
	case ErrUnauthorized:
		return e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden
	case ErrUnavailable:
		return transientStatus(e.Status)
	}
	return false
}

// transientStatus: an answer worth asking again.
func transientStatus(status int) bool {
	switch status {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}
