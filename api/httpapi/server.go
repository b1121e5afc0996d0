// Package httpapi is the HTTP interface of reviewledger (docs/contracts.md §2): the Echo
// server, bearer-token access control, admission control, RFC 9457 error
// bodies, metrics, health and the OpenAPI document.
package httpapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/reviewledger/reviewledger/api/signin"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

// Deps are what the server calls. Ledger and Reviews are required; routes
// whose dependency is nil answer 503.
type Deps struct {
	Ledger     Ledger
	Reviews    Reviews
	ReadModels ReadModels
	// Content serves GET /v1/reviews/{id}/content. When nil, Reviews is
	// used if it also implements Contents (*engine.Engine does).
	Content Contents
	// Ready are the checks of /readyz (database reachable, projections
	// within their lag threshold).
	Ready []Check
	// UI is served on GET / without authentication when set.
	UI http.Handler
	// Watcher wakes GET /v1/reviews/{id}?wait=... when the review changes
	// (the ledger's, *ledger.Watcher). Without one, wait is not waited.
	Watcher Watcher
	// Deliveries serves the admin routes of the decision webhooks
	// (*notify.DB); they answer 503 without it.
	Deliveries Deliveries
	// Checkpoints serves POST /v1/audit/checkpoints; nil (no signing key)
	// answers 503.
	Checkpoints Checkpoints
	// Requeue sends reviews back to the automated path. When nil, Reviews
	// is used if it implements Requeuer (*engine.Engine does); with
	// neither the requeue routes answer 503.
	Requeue Requeuer
	// Feed serves GET /v1/manual-queue/events (*queuefeed.Feed); the
	// route answers 503 without it.
	Feed Feed
	// ContentAccess records every read of a review's content and lists
	// them for auditors (*contentaccess.DB). Without it the content route
	// and the content-access routes answer 503: content is never served
	// unrecorded.
	ContentAccess ContentAccess
	// Sessions is the UI's sign-in through the OpenID Provider
	// (*signin.Sessions): the sign-in routes are served and a request
	// without an Authorization header is authenticated by its session
	// cookie (with the CSRF token on state-changing requests).
	Sessions Sessions
	// Tokens verifies JWT access tokens of the OpenID Provider
	// (*signin.Verifier) presented as bearer tokens beside the static
	// ones; without it only static tokens are accepted.
	Tokens TokenVerifier
	// ReadReplica, when set, is the streaming replica serving the read
	// models (*projections.Replica): /readyz checks it and reports its
	// replay lag and whether reads go to it or fall back to the primary.
	ReadReplica ReadReplica
}

// Server is the HTTP API.
type Server struct {
	cfg      Config
	deps     Deps
	commands ledger.Commands // every moderator command's write
	log      *slog.Logger
	auth     atomic.Pointer[authenticator] // swapped by SetTokens
	echo     *echo.Echo
	probes   *echo.Echo // only the probes and /metrics (ServeProbes)
	metrics  *metrics
	problems []problemKind
	// closing is closed when the HTTP server shuts down, ending the
	// queue streams (which would otherwise hold the shutdown up).
	closing   chan struct{}
	closeOnce sync.Once
}

// New returns a server. It fills cfg's defaults and refuses invalid
// settings (the error names the setting and wraps ErrInvalidConfig).
func New(cfg Config, deps Deps) (*Server, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Ledger == nil || deps.Reviews == nil {
		return nil, fmt.Errorf("api: Deps.Ledger and Deps.Reviews are required: %w", ErrInvalidConfig)
	}
	if deps.Content == nil {
		if c, ok := deps.Reviews.(Contents); ok {
			deps.Content = c
		}
	}
	if deps.Requeue == nil {
		if r, ok := deps.Reviews.(Requeuer); ok {
			deps.Requeue = r
		}
	}
	m, err := newMetrics(cfg.Registry)
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg:      cfg,
		deps:     deps,
		commands: ledger.Commands{Ledger: deps.Ledger, Now: cfg.Now},
		log:      cfg.Logger,
		metrics:  m,
		problems: problemTable,
		closing:  make(chan struct{}),
	}
	s.auth.Store(newAuthenticator(cfg.Tokens))
	s.echo = s.routes()
	s.probes = s.probeRoutes()
	return s, nil
}

// Handler returns the HTTP handler of every route.
func (s *Server) Handler() http.Handler { return s.echo }

// Echo returns the Echo instance, for mounting more routes before serving.
func (s *Server) Echo() *echo.Echo { return s.echo }

// routes builds the Echo instance. Paths, roles and statuses are those of
// docs/contracts.md §2; openapi.json describes the same routes
// (TestOpenAPIMatchesRoutes).
func (s *Server) routes() *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.handleError
	e.Use(s.requestID, s.observe, s.recover, s.traceContext)

	e.POST("/v1/reviews", s.submit, s.require(RoleSubmitter))
	e.GET("/v1/reviews/:id", s.getReview, s.require(RoleSubmitter, RoleModerator, RoleAuditor))
	e.GET("/v1/reviews/:id/events", s.getEvents, s.require(RoleAuditor))
	e.GET("/v1/reviews/:id/content", s.getContent, s.require(RoleModerator))
	e.GET("/v1/reviews/:id/content-access", s.reviewContentAccess, s.require(RoleAuditor))
	e.GET("/v1/content-access", s.exportContentAccess, s.require(RoleAuditor))
	e.POST("/v1/reviews/:id/findings", s.callback)
	e.POST("/v1/reviews/:id/decision", s.decide, s.require(RoleModerator))
	e.GET("/v1/manual-queue", s.manualQueue, s.require(RoleModerator))
	e.POST("/v1/manual-queue/:id/claim", s.claim, s.require(RoleModerator))
	e.DELETE("/v1/manual-queue/:id/claim", s.releaseClaim, s.require(RoleModerator))
	e.POST("/v1/manual-queue/:id/requeue", s.requeue, s.require(RoleModerator))
	e.POST("/v1/manual-queue/:id/hold", s.hold, s.require(RoleModerator))
	e.DELETE("/v1/manual-queue/:id/hold", s.unhold, s.require(RoleModerator))
	e.POST("/v1/manual-queue/bulk/requeue", s.bulkRequeue, s.require(RoleModerator))
	e.POST("/v1/manual-queue/bulk/release", s.bulkRelease, s.require(RoleModerator))
	e.GET("/v1/manual-queue/events", s.queueEvents, s.require(RoleModerator))
	e.GET("/v1/reviews/:id/timeline", s.timeline, s.require(RoleModerator, RoleAuditor))
	e.GET("/v1/slo", s.slo, s.require(RoleAuditor, RoleModerator))
	e.GET("/v1/slo/series", s.sloSeries, s.require(RoleAuditor, RoleModerator))
	e.GET("/v1/slo/attempts", s.sloAttempts, s.require(RoleAuditor, RoleModerator))
	e.GET("/v1/slo/providers", s.sloProviders, s.require(RoleAuditor, RoleModerator))
	e.GET("/v1/slo/providers/series", s.sloProviderSeries, s.require(RoleAuditor, RoleModerator))
	e.GET("/v1/me", s.me, s.require(RoleSubmitter, RoleModerator, RoleAuditor))
	e.GET("/v1/admin/deliveries", s.listDeliveries, s.require(RoleAdmin))
	e.POST("/v1/admin/deliveries/:id/redeliver", s.redeliver, s.require(RoleAdmin))
	e.POST("/v1/audit/checkpoints", s.checkpoint, s.require(RoleAuditor))

	s.probeRoute(e)
	e.GET("/openapi.json", s.openapi)
	e.HEAD("/openapi.json", s.openapi, headLikeGet)
	if s.deps.Sessions != nil {
		h := echo.WrapHandler(s.deps.Sessions)
		e.GET(signin.PathLogin, h)
		e.GET(signin.PathCallback, h)
		e.POST(signin.PathLogout, h)
		e.GET(signin.PathSession, h)
	}
	if s.deps.UI != nil {
		e.GET("/", s.uiRoute)
		e.HEAD("/", s.uiRoute, headLikeGet)
		e.GET("/ui/*", s.uiRoute) // the page's script, style sheet and icon
		e.HEAD("/ui/*", s.uiRoute, headLikeGet)
	}
	return e
}

// probeRoute adds the unauthenticated probes and /metrics to e.
func (s *Server) probeRoute(e *echo.Echo) {
	e.GET("/healthz", s.healthz)
	e.HEAD("/healthz", s.healthz, headLikeGet)
	e.GET("/readyz", s.readyz)
	e.HEAD("/readyz", s.readyz, headLikeGet)
	metrics := echo.WrapHandler(promhttp.HandlerFor(s.cfg.Registry, promhttp.HandlerOpts{}))
	e.GET("/metrics", metrics)
	e.HEAD("/metrics", metrics, headLikeGet)
}

// probeRoutes is the Echo instance of a process that serves no API:
// /healthz, /readyz and /metrics, everything else 404.
func (s *Server) probeRoutes() *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.handleError
	e.Use(s.requestID, s.recover)
	s.probeRoute(e)
	return e
}

// HTTPServer returns an http.Server for the handler with the configured
// timeouts.
func (s *Server) HTTPServer(addr string) *http.Server { return s.httpServer(addr, s.echo) }

func (s *Server) httpServer(addr string, h http.Handler) *http.Server {
	srv := &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		ReadTimeout:       s.cfg.ReadTimeout,
		WriteTimeout:      s.cfg.WriteTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	srv.RegisterOnShutdown(s.Close)
	return srv
}

// Close ends the long-lived queue streams; the server shutting down calls
// it, and so may a caller serving the Handler itself.
func (s *Server) Close() { s.closeOnce.Do(func() { close(s.closing) }) }

// Serve serves on l until ctx is done, then shuts down gracefully within
// Config.ShutdownTimeout.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	return s.serve(ctx, l, s.HTTPServer(l.Addr().String()))
}

func (s *Server) serve(ctx context.Context, l net.Listener, srv *http.Server) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve http: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shut down http: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve http: %w", err)
	}
	return nil
}

// ListenAndServe listens on addr and serves until ctx is done.
func (s *Server) ListenAndServe(ctx context.Context, addr string) error {
	l, err := new(net.ListenConfig).Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	return s.Serve(ctx, l)
}

// ListenAndServeProbes listens on addr and serves only /healthz, /readyz
// and /metrics until ctx is done: the HTTP side of a process running no
// API, for its orchestrator and Prometheus.
func (s *Server) ListenAndServeProbes(ctx context.Context, addr string) error {
	l, err := new(net.ListenConfig).Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	return s.serve(ctx, l, s.httpServer(l.Addr().String(), s.probes))
}
