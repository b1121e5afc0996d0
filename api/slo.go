package api

import (
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
)

// DefaultSLOWindow is the window of GET /v1/slo without one.
const DefaultSLOWindow = time.Hour

// maxSLOWindow is the longest window accepted.
const maxSLOWindow = 90 * 24 * time.Hour

type latencyView struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
}

type queueSummaryView struct {
	Depth            int64 `json:"depth"`
	OldestAgeSeconds int64 `json:"oldest_age_seconds"`
}

type sloView struct {
	Total                  int64            `json:"total"`
	CompletedWithinBudget  int64            `json:"completed_within_budget"`
	WithinBudgetRatio      float64          `json:"within_budget_ratio"`
	Escalated              int64            `json:"escalated"`
	ConflictingCompletions int64            `json:"conflicting_completions"`
	LatencyMS              latencyView      `json:"latency_ms"`
	ManualQueue            queueSummaryView `json:"manual_queue"`
}

// parseWindow accepts Go durations ("90s", "1h30m") and whole days ("7d").
func parseWindow(q string) (time.Duration, error) {
	if q == "" {
		return DefaultSLOWindow, nil
	}
	var d time.Duration
	var err error
	var days int
	if n, scanErr := fmt.Sscanf(q, "%dd", &days); scanErr == nil && n == 1 && fmt.Sprintf("%dd", days) == q {
		d = time.Duration(days) * 24 * time.Hour
	} else {
		d, err = time.ParseDuration(q)
	}
	if err != nil || d <= 0 || d > maxSLOWindow {
		return 0, fieldError("window", fmt.Sprintf("must be a positive duration up to 90d such as 1h or 7d, got %q", q))
	}
	return d, nil
}

// slo is GET /v1/slo.
func (s *Server) slo(c echo.Context) error {
	window, err := parseWindow(c.QueryParam("window"))
	if err != nil {
		return err
	}
	class, err := classParam(c)
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
	v := sloView{
		Total:                  sum.Total,
		CompletedWithinBudget:  sum.CompletedWithinBudget,
		Escalated:              sum.Escalated,
		ConflictingCompletions: sum.ConflictingCompletions,
		LatencyMS:              latencyView{P50: sum.LatencyP50MS, P90: sum.LatencyP90MS, P99: sum.LatencyP99MS},
		ManualQueue:            queueSummaryView{Depth: sum.QueueDepth, OldestAgeSeconds: int64(sum.OldestAge / time.Second)},
	}
	if sum.Total > 0 {
		v.WithinBudgetRatio = float64(sum.CompletedWithinBudget) / float64(sum.Total)
	}
	return c.JSON(http.StatusOK, v)
}
