package api

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
)

// Manual-queue limits (DESIGN 5.2).
const (
	DefaultQueueLimit = 100
	MaxQueueLimit     = 1000
)

type queueItemView struct {
	ReviewID       string     `json:"review_id"`
	ContentClass   string     `json:"content_class"`
	Reason         string     `json:"reason"`
	Attempts       int        `json:"attempts"`
	EscalatedAt    time.Time  `json:"escalated_at"`
	AgeSeconds     int64      `json:"age_seconds"`
	ClaimedBy      *string    `json:"claimed_by"`
	ClaimExpiresAt *time.Time `json:"claim_expires_at"`
}

type queueView struct {
	Items []queueItemView `json:"items"`
}

// classParam reads the optional content_class query parameter.
func classParam(c echo.Context) (string, error) {
	class := c.QueryParam("content_class")
	if len(class) > 128 {
		return "", fieldError("content_class", "longer than 128 characters")
	}
	return class, nil
}

// manualQueue is GET /v1/manual-queue. A claim whose lease has expired is
// shown as unclaimed.
func (s *Server) manualQueue(c echo.Context) error {
	class, err := classParam(c)
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
	items, err := s.deps.ReadModels.ManualQueue(c.Request().Context(), class, limit)
	if err != nil {
		return err
	}
	now := s.cfg.Now()
	v := queueView{Items: make([]queueItemView, 0, len(items))}
	for _, it := range items {
		iv := queueItemView{
			ReviewID:     it.ReviewID,
			ContentClass: it.ContentClass,
			Reason:       it.Reason,
			Attempts:     it.Attempts,
			EscalatedAt:  it.EscalatedAt.UTC(),
			AgeSeconds:   max(0, int64(now.Sub(it.EscalatedAt)/time.Second)),
		}
		if it.ClaimedBy != "" && it.ClaimExpiresAt.After(now) {
			by, until := it.ClaimedBy, it.ClaimExpiresAt.UTC()
			iv.ClaimedBy, iv.ClaimExpiresAt = &by, &until
		}
		v.Items = append(v.Items, iv)
	}
	return c.JSON(http.StatusOK, v)
}

type claimView struct {
	ReviewID       string    `json:"review_id"`
	ClaimedBy      string    `json:"claimed_by"`
	ClaimExpiresAt time.Time `json:"claim_expires_at"`
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
	cl, err := s.deps.ReadModels.Claim(c.Request().Context(), id, principal(c).Name, s.cfg.ClaimLease, s.cfg.Now())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, claimView{ReviewID: cl.ReviewID, ClaimedBy: cl.ClaimedBy, ClaimExpiresAt: cl.ExpiresAt.UTC()})
}
