package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/reviewledger/reviewledger/projections"
)

// readyTimeout bounds all readiness checks together.
const readyTimeout = 2 * time.Second

// healthz is GET /healthz: the process is alive and serving.
func (s *Server) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

type readyView struct {
	Status string            `json:"status"`
	Checks map[string]string `json:"checks"`
	// ReadReplica is the replica serving the read models, when one is
	// configured. It never fails readiness: while it is down or lags, the
	// primary serves the read models.
	ReadReplica *projections.ReplicaStatus `json:"read_replica,omitempty"`
}

// readyz is GET /readyz: 200 when every check passes, else a 503 problem
// naming the failed checks.
func (s *Server) readyz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), readyTimeout)
	defer cancel()
	v := readyView{Status: "ok", Checks: make(map[string]string, len(s.deps.Ready))}
	var failed []error
	for _, ch := range s.deps.Ready {
		if err := ch.Check(ctx); err != nil {
			v.Checks[ch.Name] = "failing"
			failed = append(failed, fmt.Errorf("%s: %w", ch.Name, err))
			continue
		}
		v.Checks[ch.Name] = "ok"
	}
	if s.deps.ReadReplica != nil {
		st := s.deps.ReadReplica.Check(ctx)
		v.ReadReplica = &st
	}
	if len(failed) > 0 && clientGone(c) {
		// The checks failed because the prober hung up, not the service.
		return fmt.Errorf("readiness checks: %w", c.Request().Context().Err())
	}
	if len(failed) > 0 {
		// The cause may hold connection details: log it, answer only names.
		s.log.WarnContext(ctx, "not ready", "request_id", requestID(c), "error", errors.Join(failed...).Error())
		names := ""
		for _, ch := range s.deps.Ready {
			if v.Checks[ch.Name] == "failing" {
				names += " " + ch.Name
			}
		}
		return fmt.Errorf("failing checks:%s: %w", names, ErrNotReady)
	}
	return c.JSON(http.StatusOK, v)
}
