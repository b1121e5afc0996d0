package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/reviewledger/reviewledger/api/engine"
	"github.com/reviewledger/reviewledger/api/engine/provider"
	"github.com/reviewledger/reviewledger/api/notify"
	"github.com/reviewledger/reviewledger/api/signin"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/projections"
)

// ProblemTypeBase prefixes every problem type URI; the kind follows it.
// docs/api.md lists the kinds.
const ProblemTypeBase = "urn:reviewledger:problem:"

// Problem is an RFC 9457 problem details body.
type Problem struct {
	Type      string `json:"type"`
	Title     string `json:"title"`
	Status    int    `json:"status"`
	Detail    string `json:"detail,omitempty"`
	Instance  string `json:"instance,omitempty"`
	Field     string `json:"field,omitempty"`
	RequestID string `json:"request_id,omitempty"`
	// ClaimedBy names the holder of the live claim that refused the
	// request (claimed-by-other), an extension member.
	ClaimedBy string `json:"claimed_by,omitempty"`
}

// MIMEProblem is the media type of error bodies.
const MIMEProblem = "application/problem+json"

// Errors of the HTTP layer itself.
var (
	// ErrInvalidRequest: a malformed body, parameter or query.
	ErrInvalidRequest = errors.New("invalid request")
	// ErrBodyTooLarge: the body is over Config.MaxBodyBytes.
	ErrBodyTooLarge = errors.New("request body too large")
	// ErrOverloaded: admission control refused new work.
	ErrOverloaded = errors.New("too many reviews in flight")
	// ErrNotReady: a readiness check failed.
	ErrNotReady = errors.New("not ready")
	// ErrRouteNotFound and ErrMethodNotAllowed answer unknown routes.
	ErrRouteNotFound    = errors.New("no such route")
	ErrMethodNotAllowed = errors.New("method not allowed on this route")
)

// problemKind is one row of the error table.
type problemKind struct {
	err    error
	status int
	kind   string
	title  string
}

// problemTable maps errors to HTTP statuses: the first row whose error
// matches (errors.Is) decides, so more specific errors come first.
// Anything else is a 500 whose detail is never shown. docs/api.md lists the
// kinds; openapi.json documents them (x-problem-types).
var problemTable = []problemKind{
	{ErrUnauthenticated, http.StatusUnauthorized, "unauthenticated", "Missing or invalid bearer token"},
	{ErrForbidden, http.StatusForbidden, "forbidden", "Role not allowed"},
	{ErrNoRole, http.StatusForbidden, "no-role", "No role mapped to this user"},
	{signin.ErrCSRF, http.StatusForbidden, "csrf", "Missing or wrong CSRF token"},
	{ErrBodyTooLarge, http.StatusRequestEntityTooLarge, "body-too-large", "Request body too large"},
	{ErrOverloaded, http.StatusTooManyRequests, "overloaded", "Too many reviews in flight"},
	{ErrRouteNotFound, http.StatusNotFound, "route-not-found", "No such route"},
	{ErrMethodNotAllowed, http.StatusMethodNotAllowed, "method-not-allowed", "Method not allowed"},
	{ErrNotReady, http.StatusServiceUnavailable, "not-ready", "Not ready"},
	{eventstore.ErrUnavailable, http.StatusServiceUnavailable, "unavailable", "Temporarily unavailable"},
	{provider.ErrInvalidSignature, http.StatusUnauthorized, "invalid-signature", "Invalid or stale webhook signature"},
	{engine.ErrConflictingCompletion, http.StatusConflict, "conflicting-completion", "Conflicting completion"},
	{engine.ErrDeliveryInProgress, http.StatusServiceUnavailable, "delivery-in-progress", "Callback delivery still being handled"},
	{ErrInvalidRequest, http.StatusBadRequest, "invalid-request", "Invalid request"},
	{projections.ErrInvalidQuery, http.StatusBadRequest, "invalid-request", "Invalid request"},
	{notify.ErrInvalidQuery, http.StatusBadRequest, "invalid-request", "Invalid request"},
	{domain.ErrInvalidReviewID, http.StatusBadRequest, "invalid-review-id", "Invalid review ID"},
	{domain.ErrInvalidDecision, http.StatusBadRequest, "invalid-decision", "Invalid decision"},
	{domain.ErrReviewNotFound, http.StatusNotFound, "review-not-found", "Review not found"},
	{notify.ErrDeliveryNotFound, http.StatusNotFound, "delivery-not-found", "Delivery not found"},
	{engine.ErrContentPurged, http.StatusGone, "content-purged", "Content purged by retention"},
	{domain.ErrReviewExists, http.StatusConflict, "review-exists", "Review exists with other content or class"},
	{domain.ErrNotInManualReview, http.StatusConflict, "not-in-manual-review", "Review is not in manual_review"},
	{domain.ErrAlreadyApproved, http.StatusConflict, "already-approved", "Moderator already approved this review"},
	{domain.ErrClaimedByOther, http.StatusConflict, "claimed-by-other", "Claimed by another moderator"},
	{domain.ErrClaimRequired, http.StatusConflict, "claim-required", "A live claim is required"},
	{domain.ErrNotClaimed, http.StatusConflict, "not-claimed", "Review is not claimed"},
	{domain.ErrAlreadyHeld, http.StatusConflict, "already-held", "Review is already on hold"},
	{domain.ErrNotHeld, http.StatusConflict, "not-held", "Review is not on hold"},
	{domain.ErrVersionMismatch, http.StatusConflict, "version-moved", "Review version moved"},
	{eventstore.ErrWrongExpectedVersion, http.StatusConflict, "version-moved", "Review version moved"},
	{domain.ErrAttemptNotInFlight, http.StatusConflict, "conflicting-completion", "Attempt is no longer in flight"},
	{domain.ErrNotPending, http.StatusConflict, "conflicting-completion", "Review is no longer pending"},
	{domain.ErrUnknownClass, http.StatusUnprocessableEntity, "unknown-class", "Unknown content class"},
	{domain.ErrInvalidFinding, http.StatusUnprocessableEntity, "invalid-finding", "Invalid finding"},
}

var internalProblem = problemKind{status: http.StatusInternalServerError, kind: "internal", title: "Internal server error"}

// routeError is an error of routing itself: its message is the whole
// detail ("no route for GET /v1/nope"), and it matches its sentinel.
type routeError struct {
	msg string
	err error
}

func (e *routeError) Error() string { return e.msg }
func (e *routeError) Unwrap() error { return e.err }

// maxPathInDetail bounds how much of a request path a detail quotes.
const maxPathInDetail = 200

// fromEcho replaces the errors Echo's router and body reader raise
// (*echo.HTTPError, whose text reads "code=404, message=Not Found") with
// ours, whose detail says what was asked for.
func fromEcho(err error, r *http.Request) error {
	var he *echo.HTTPError
	if !errors.As(err, &he) {
		return err
	}
	path := r.URL.Path
	if len(path) > maxPathInDetail {
		path = path[:maxPathInDetail] + "…"
	}
	switch he.Code {
	case http.StatusNotFound:
		return &routeError{msg: fmt.Sprintf("no route for %s %s", methodLabel(r.Method), path), err: ErrRouteNotFound}
	case http.StatusMethodNotAllowed:
		return &routeError{msg: fmt.Sprintf("method %s is not allowed on %s", methodLabel(r.Method), path), err: ErrMethodNotAllowed}
	case http.StatusRequestEntityTooLarge:
		return &routeError{msg: "request body too large", err: ErrBodyTooLarge}
	}
	return err
}

// classify finds the row for err, and the field at fault if any.
func (s *Server) classify(err error) (problemKind, string, bool) {
	for _, row := range s.problems {
		if errors.Is(err, row.err) {
			field := ""
			var fe *domain.FieldError
			if errors.As(err, &fe) {
				field = fe.Field
			}
			return row, field, true
		}
	}
	return internalProblem, "", false
}

// handleError is Echo's error handler: every error becomes a problem body.
func (s *Server) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	err = fromEcho(err, c.Request())
	row, field, known := s.classify(err)
	if !known && clientGone(c) {
		// The client hung up (a closed connection or a reset stream) and
		// its request's context ended what we were doing for it: not a
		// server fault, and nobody reads the answer.
		s.log.LogAttrs(c.Request().Context(), slog.LevelInfo, "request cancelled by the client",
			slog.String("request_id", requestID(c)),
			slog.String("method", c.Request().Method),
			slog.String("route", c.Path()),
			slog.String("error", err.Error()))
		_ = c.NoContent(StatusClientClosedRequest)
		return
	}
	p := Problem{
		Type:      ProblemTypeBase + row.kind,
		Title:     row.title,
		Status:    row.status,
		Instance:  c.Request().URL.Path,
		Field:     field,
		RequestID: requestID(c),
	}
	if held := (*domain.ClaimedError)(nil); errors.As(err, &held) {
		p.ClaimedBy = held.Moderator
	}
	switch {
	case known && row.kind == "unavailable":
		// The database went away for a while: the client retries, the same
		// request with the same review ID. The driver's words stay in the log.
		p.Detail = "the service's database is unavailable; retry after the Retry-After seconds"
		s.log.WarnContext(c.Request().Context(), "request refused: database unavailable",
			slog.String("request_id", p.RequestID),
			slog.String("method", c.Request().Method),
			slog.String("route", c.Path()),
			slog.String("error", err.Error()))
	case known:
		p.Detail = err.Error()
	default:
		p.Detail = "an unexpected error occurred; quote the request_id when reporting it"
		s.log.ErrorContext(c.Request().Context(), "request failed",
			slog.String("request_id", p.RequestID),
			slog.String("method", c.Request().Method),
			slog.String("route", c.Path()),
			slog.String("error", err.Error()))
	}
	h := c.Response().Header()
	switch row.status {
	case http.StatusUnauthorized:
		if errors.Is(err, ErrUnauthenticated) {
			h.Set(echo.HeaderWWWAuthenticate, `Bearer realm="reviewledger"`)
		}
	case http.StatusTooManyRequests:
		h.Set(echo.HeaderRetryAfter, strconv.Itoa(retryAfterSeconds(s.cfg.RetryAfter)))
	case http.StatusServiceUnavailable:
		if row.kind == "unavailable" || row.kind == "delivery-in-progress" {
			h.Set(echo.HeaderRetryAfter, "1")
		}
	}
	writeProblem(c, p)
}

// StatusClientClosedRequest is the status recorded, in the request log and
// reviewledger_http_requests_total, for a request whose client went away
// before it was answered (nginx's 499). It is never a 500.
const StatusClientClosedRequest = 499

// clientGone reports whether the request's context was cancelled: net/http
// cancels it when the client closes the connection or resets the stream.
func clientGone(c echo.Context) bool {
	return errors.Is(c.Request().Context().Err(), context.Canceled)
}

func writeProblem(c echo.Context, p Problem) {
	body, err := json.Marshal(p)
	if err != nil {
		body = []byte(`{"type":"` + ProblemTypeBase + `internal","title":"Internal server error","status":500}`)
	}
	c.Response().Header().Set(echo.HeaderContentType, MIMEProblem)
	if c.Request().Method == http.MethodHead {
		_ = c.NoContent(p.Status)
		return
	}
	_ = c.Blob(p.Status, MIMEProblem, body)
}

func retryAfterSeconds(d time.Duration) int {
	s := int(d.Seconds() + 0.999)
	return max(1, s)
}
