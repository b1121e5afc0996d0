package httpapi

import (
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/reviewledger/reviewledger/domain"
)

// providerParam is the query's provider: "" for every one, else a
// provider name (whether or not the policy declares it now: a provider
// taken out of the policy keeps its history).
func providerParam(c echo.Context) (string, error) {
	p := c.QueryParam("provider")
	if p != "" && !domain.ValidProviderName(p) {
		return "", fieldError("provider", fmt.Sprintf("must be a provider name (a lowercase letter, then up to %d letters, digits, _ or -), got %q",
			domain.MaxProviderNameLen-1, p))
	}
	return p, nil
}

// sloProviders is GET /v1/slo/providers: each provider's attempts, the
// reviews it decided and its shadow comparison, per class, over a window.
func (s *Server) sloProviders(c echo.Context) error {
	q, err := s.sloQuery(c, "slo providers", DefaultSLOWindow, false, true)
	if err != nil {
		return err
	}
	report, err := s.deps.ReadModels.ProviderSLO(c.Request().Context(), q.window, q.class, q.provider, s.cfg.Now())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, report)
}

// sloProviderSeries is GET /v1/slo/providers/series: the figures of
// GET /v1/slo/providers step by step.
func (s *Server) sloProviderSeries(c echo.Context) error {
	q, err := s.sloQuery(c, "slo provider series", DefaultSeriesWindow, true, true)
	if err != nil {
		return err
	}
	series, err := s.deps.ReadModels.ProviderSeries(c.Request().Context(), q.window, q.step, q.class, q.provider, s.cfg.Now())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, series)
}
