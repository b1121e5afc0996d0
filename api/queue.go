package api

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/projections"
)

// Manual-queue limits (docs/contracts.md §2).
const (
	DefaultQueueLimit = 100
	MaxQueueLimit     = 1000
)

// classParam reads the optional content_class query parameter: 400 when
// it is too long, 422 unknown-class when Config.Classes is set and does not
// hold it.
func (s *Server) classParam(c echo.Context) (string, error) {
	class := c.QueryParam("content_class")
	if len(class) > 128 {
		return "", fieldError("content_class", "longer than 128 characters")
	}
	if class != "" && len(s.cfg.Classes) > 0 && !slices.Contains(s.cfg.Classes, class) {
		return "", &domain.FieldError{Field: "content_class",
			Reason: fmt.Sprintf("unknown content class %q; the policy's classes are %s", class, strings.Join(s.cfg.Classes, ", ")),
			Err:    domain.ErrUnknownClass}
	}
	return class, nil
}

// manualQueue is GET /v1/manual-queue, from the manual_queue projection.
func (s *Server) manualQueue(c echo.Context) error {
	class, err := s.classParam(c)
	if err != nil {
		return err
	}
	limit := DefaultQueueLimit
	if q := c.QueryParam("limit"); q != "" {
		n, err := strconv.Atoi(q)
		if err != nil || n < 1 || n > MaxQueueLimit {
			return fieldError("limit", fmt.Sprintf("must be an integer from 1 to %d, got %q", MaxQueueLimit, q))
		}
		limit = n
	}
	if s.deps.ReadModels == nil {
		return fmt.Errorf("manual queue: no read models configured: %w", ErrNotReady)
	}
	q, err := s.deps.ReadModels.ManualQueue(c.Request().Context(), class, limit, s.cfg.Now())
	if err != nil {
		return err
	}
	if q.Items == nil {
		q.Items = []projections.QueueItem{}
	}
	return c.JSON(http.StatusOK, q)
}

// claim is POST /v1/manual-queue/{id}/claim: a lease of Config.ClaimLease
// for the calling moderator. It takes no body; one sent is ignored.
// Claiming again renews the lease.
func (s *Server) claim(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	if s.deps.ReadModels == nil {
		return fmt.Errorf("claim: no read models configured: %w", ErrNotReady)
	}
	ctx := c.Request().Context()
	cl, err := s.deps.ReadModels.Claim(ctx, id, principal(c).Name, s.cfg.ClaimLease, s.cfg.Now())
	if errors.Is(err, projections.ErrNotInQueue) {
		// Unknown (404) or not waiting for a moderator (409): the ledger
		// tells which.
		if _, lerr := s.deps.Ledger.Load(ctx, id); lerr != nil {
			return lerr
		}
		return fmt.Errorf("%w: %w", err, domain.ErrNotInManualReview)
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, cl)
}
