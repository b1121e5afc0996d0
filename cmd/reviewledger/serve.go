package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
)

// shutdownTimeout bounds the graceful shutdown after SIGINT or SIGTERM.
const shutdownTimeout = 10 * time.Second

// ServeCmd runs the service.
type ServeCmd struct {
	Config `embed:""`
	Runner RunnerConfig `embed:""`
}

// Run opens the database, applies pending migrations and serves HTTP until
// ctx is done (SIGINT or SIGTERM), then shuts down gracefully.
func (c *ServeCmd) Run(ctx context.Context, log *slog.Logger) error {
	cfg := &c.Config
	pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	defer pool.Close()
	if _, err := migrate(ctx, pool, log); err != nil {
		return err
	}
	if len(cfg.Tokens) == 0 {
		log.Warn("REVIEWLEDGER_TOKENS is empty: every authenticated route answers 401")
	}

	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.GET("/healthz", func(c echo.Context) error {
		return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
	})

	srv := &http.Server{Addr: cfg.Addr, Handler: e, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	log.Info("serving", "addr", cfg.Addr, "version", version)

	select {
	case err := <-errc:
		return fmt.Errorf("REVIEWLEDGER_ADDR %s: %w", cfg.Addr, err)
	case <-ctx.Done():
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
