package httpapi

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/reviewledger/reviewledger/projections"
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

// sloQuery is what the SLO routes read from their query string.
type sloQuery struct {
	window, step    time.Duration
	class, provider string
}

// sloQuery reads the query of an SLO route named what: window (def
// without one), step when series, content_class, and provider when
// withProvider; it fails with ErrNotReady without read models.
func (s *Server) sloQuery(c echo.Context, what string, def time.Duration, series, withProvider bool) (sloQuery, error) {
	q := sloQuery{window: def}
	var err error
	if w := c.QueryParam("window"); w != "" {
		if q.window, err = parseWindow(w); err != nil {
			return q, err
		}
	}
	if series {
		if q.step, err = parseStep(c.QueryParam("step"), q.window); err != nil {
			return q, err
		}
	}
	if q.class, err = s.classParam(c); err != nil {
		return q, err
	}
	if withProvider {
		if q.provider, err = providerParam(c); err != nil {
			return q, err
		}
	}
	if s.deps.ReadModels == nil {
		return q, fmt.Errorf("%s: no read models configured: %w", what, ErrNotReady)
	}
	return q, nil
}

// slo is GET /v1/slo, from the SLO read models.
func (s *Server) slo(c echo.Context) error {
	q, err := s.sloQuery(c, "slo", DefaultSLOWindow, false, false)
	if err != nil {
		return err
	}
	sum, err := s.deps.ReadModels.SLO(c.Request().Context(), q.window, q.class, s.cfg.Now())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, sum)
}

// DefaultSeriesWindow is the window of GET /v1/slo/series without one.
const DefaultSeriesWindow = 24 * time.Hour

// seriesSteps are the steps GET /v1/slo/series picks from when none is
// given: the shortest that keeps a window to at most 300 points.
var seriesSteps = []time.Duration{time.Minute, 5 * time.Minute, 15 * time.Minute, 30 * time.Minute, time.Hour,
	3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour}

// parseStep accepts whole minutes as a Go duration ("5m", "1h") or whole
// days ("1d"); without one, it picks from seriesSteps.
func parseStep(q string, window time.Duration) (time.Duration, error) {
	if q == "" {
		for _, st := range seriesSteps {
			if window/st <= 300 {
				return st, nil
			}
		}
		return seriesSteps[len(seriesSteps)-1], nil
	}
	bad := fieldError("step", fmt.Sprintf("must be a whole number of minutes such as 5m, 1h or 1d, got %q", q))
	if days, ok := strings.CutSuffix(q, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 1 || n > 366 {
			return 0, bad
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(q)
	if err != nil || d < time.Minute || d%time.Minute != 0 {
		return 0, bad
	}
	return d, nil
}

// sloSeries is GET /v1/slo/series: the SLO figures of a window step by
// step, from the read models.
func (s *Server) sloSeries(c echo.Context) error {
	q, err := s.sloQuery(c, "slo series", DefaultSeriesWindow, true, false)
	if err != nil {
		return err
	}
	series, err := s.deps.ReadModels.SLOSeries(c.Request().Context(), q.window, q.step, q.class, s.cfg.Now())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, series)
}

// attemptsView is the body of GET /v1/slo/attempts.
type attemptsView struct {
	From    time.Time                  `json:"from"`
	To      time.Time                  `json:"to"`
	Classes []projections.ServiceTimes `json:"classes"`
}

// sloAttempts is GET /v1/slo/attempts: each class's attempt service-time
// distribution over a window (what capacity --from-db plans from).
func (s *Server) sloAttempts(c echo.Context) error {
	q, err := s.sloQuery(c, "slo attempts", DefaultSeriesWindow, false, false)
	if err != nil {
		return err
	}
	now := s.cfg.Now()
	times, err := s.deps.ReadModels.AttemptServiceTimes(c.Request().Context(), q.class, q.window, now)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, attemptsView{From: now.Add(-q.window).UTC().Truncate(time.Minute), To: now, Classes: times})
}
