package api

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
)

// DefaultSLOWindow is the window of GET /v1/slo without one.
const DefaultSLOWindow = time.Hour

// maxSLOWindow is the longest window accepted.
const maxSLOWindow = 366 * 24 * time.Hour

// parseWindow accepts Go durations ("90s", "1h30m") and whole days ("7d").
func parseWindow(q string) (time.Duration, error) {
	if q == "" {
		return DefaultSLOWindow, nil
	}
	bad := fieldError("window", fmt.Sprintf("must be a positive duration up to 366d such as 1h or 7d, got %q", q))
	if days, ok := strings.CutSuffix(q, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 1 || n > int(maxSLOWindow/(24*time.Hour)) {
			return 0, bad
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(q)
	if err != nil || d <= 0 || d > maxSLOWindow {
		return 0, bad
	}
	return d, nil
}

// slo is GET /v1/slo, from the SLO read models.
func (s *Server) slo(c echo.Context) error {
	window, err := parseWindow(c.QueryParam("window"))
	if err != nil {
		return err
	}
	class, err := s.classParam(c)
	if err != nil {
		return err
	}
	if s.deps.ReadModels == nil {
		return fmt.Errorf("slo: no read models configured: %w", ErrNotReady)
	}
	sum, err := s.deps.ReadModels.SLO(c.Request().Context(), window, class, s.cfg.Now())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, sum)
}
