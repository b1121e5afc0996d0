package main

// The floors: what the target asks of any service, measured beside
// reviewledger in every round. Each is a server of the same shape run as
// its own process (this binary, `reviewledger-bench floor-serve MODE`),
// on the same HTTP stack (Echo), answering the same submit with its own
// wait through the same instant provider:
//
//   - floorAPI stores nothing: the submit's HTTP exchange and the
//     provider call are all it does, so its CPU per review is what the two
//     HTTP exchanges of a review cost, whatever a service stores;
//   - floorTable runs the CRUD baseline's three autocommit statements
//     around the provider call (INSERT pending, UPDATE attempts, then
//     UPDATE state once the provider answered): the naive table put behind
//     the API.
//
// Neither keeps an event, a hash chain, a work record, a read model, a
// deadline or a retry: they are measurements, not services.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
)

// floorCommand is the hidden first argument that runs a floor's server.
const floorCommand = "floor-serve"

// The floors' modes.
const (
	floorAPI   = "api"
	floorTable = "table"
)

// floorSchema is floorTable's table: the CRUD baseline's, with the
// timestamps the bench reads back.
const floorSchema = `CREATE TABLE IF NOT EXISTS floor_review (
	id           text PRIMARY KEY,
	state        text NOT NULL,
	attempts     int NOT NULL,
	submitted_at timestamptz NOT NULL,
	decided_at   timestamptz
)`

// floor is one floor's server.
type floor struct {
	mode     string
	token    string // the bearer token a submit must carry
	provider string // the provider's URL
	pool     *pgxpool.Pool
	client   *http.Client
}

// floorServe runs a floor's server until SIGTERM or SIGINT, configured as
// serve is (DATABASE_URL, REVIEWLEDGER_ADDR, REVIEWLEDGER_PROVIDER_URL);
// it returns the exit status.
func floorServe(args []string) int {
	if len(args) != 1 || (args[0] != floorAPI && args[0] != floorTable) {
		fmt.Fprintf(os.Stderr, "reviewledger-bench %s: the mode must be %s or %s, got %q\n", floorCommand, floorAPI, floorTable, args)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	f, err := newFloor(ctx, args[0], os.Getenv("DATABASE_URL"), os.Getenv("REVIEWLEDGER_PROVIDER_URL"), submitterToken, 32)
	if err != nil {
		fmt.Fprintf(os.Stderr, "reviewledger-bench %s: %v\n", floorCommand, err)
		return 1
	}
	defer f.close()
	e := f.echo()
	served := make(chan error, 1)
	go func() { served <- e.Start(os.Getenv("REVIEWLEDGER_ADDR")) }()
	select {
	case err := <-served:
		fmt.Fprintf(os.Stderr, "reviewledger-bench %s: REVIEWLEDGER_ADDR: %v\n", floorCommand, err)
		return 1
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Shutdown(sctx); err != nil {
		fmt.Fprintf(os.Stderr, "reviewledger-bench %s: %v\n", floorCommand, err)
		return 1
	}
	return 0
}

// newFloor prepares a floor's server: floorTable connects to dbURL with
// conns connections (one per client) and creates its table.
func newFloor(ctx context.Context, mode, dbURL, providerURL, token string, conns int) (*floor, error) {
	if providerURL == "" {
		return nil, errors.New("REVIEWLEDGER_PROVIDER_URL is not set")
	}
	f := &floor{mode: mode, token: token, provider: providerURL, client: &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{Proxy: nil, MaxIdleConns: 2 * conns, MaxIdleConnsPerHost: 2 * conns, IdleConnTimeout: time.Minute},
	}}
	if mode != floorTable {
		return f, nil
	}
	pc, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	pc.MaxConns = int32(conns)
	if f.pool, err = pgxpool.NewWithConfig(ctx, pc); err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	if _, err := f.pool.Exec(ctx, floorSchema); err != nil {
		f.pool.Close()
		return nil, fmt.Errorf("DATABASE_URL: create the table: %w", err)
	}
	return f, nil
}

func (f *floor) close() {
	if f.pool != nil {
		f.pool.Close()
	}
}

// echo is the floor's HTTP API: the submit, and /healthz.
func (f *floor) echo() *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.GET("/healthz", func(c echo.Context) error { return c.String(http.StatusOK, "ok") })
	e.POST("/v1/reviews", f.submit)
	return e
}

// floorView is the part of a review's view the bench reads.
type floorView struct {
	ReviewID    string    `json:"review_id"`
	State       string    `json:"state"`
	SubmittedAt time.Time `json:"submitted_at"`
	DecidedAt   time.Time `json:"decided_at"`
}

// submit takes a review, asks the provider and answers its decision.
func (f *floor) submit(c echo.Context) error {
	if c.Request().Header.Get("Authorization") != "Bearer "+f.token {
		return echo.NewHTTPError(http.StatusUnauthorized, "a submitter token is required")
	}
	var in struct {
		ReviewID string `json:"review_id"`
		Content  string `json:"content"`
	}
	if err := json.NewDecoder(c.Request().Body).Decode(&in); err != nil || in.ReviewID == "" {
		return echo.NewHTTPError(http.StatusBadRequest, "review_id: a JSON body naming the review is required")
	}
	ctx := c.Request().Context()
	v := floorView{ReviewID: in.ReviewID}
	if f.pool != nil {
		if err := f.pool.QueryRow(ctx, `INSERT INTO floor_review (id, state, attempts, submitted_at) VALUES ($1, 'pending', 0, now()) RETURNING submitted_at`,
			in.ReviewID).Scan(&v.SubmittedAt); err != nil {
			return fmt.Errorf("insert: %w", err)
		}
		if _, err := f.pool.Exec(ctx, `UPDATE floor_review SET attempts = attempts + 1 WHERE id = $1`, in.ReviewID); err != nil {
			return fmt.Errorf("update attempts: %w", err)
		}
	} else {
		v.SubmittedAt = time.Now()
	}
	state, err := f.ask(ctx, in.ReviewID, in.Content)
	if err != nil {
		return echo.NewHTTPError(http.StatusBadGateway, err.Error())
	}
	v.State = state
	if f.pool != nil {
		if err := f.pool.QueryRow(ctx, `UPDATE floor_review SET state = $2, decided_at = clock_timestamp() WHERE id = $1 AND state = 'pending' RETURNING decided_at`,
			in.ReviewID, state).Scan(&v.DecidedAt); err != nil {
			return fmt.Errorf("update state: %w", err)
		}
	} else {
		v.DecidedAt = time.Now()
	}
	return c.JSON(http.StatusOK, v)
}

// ask calls the provider once and returns the state it found.
func (f *floor) ask(ctx context.Context, reviewID, content string) (string, error) {
	body, err := json.Marshal(map[string]string{"review_id": reviewID, "content": content})
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.provider, bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := f.client.Do(req)
	if err != nil {
		return "", fmt.Errorf("provider: %w", err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(res.Body, 512))
		return "", fmt.Errorf("provider: HTTP %d %s", res.StatusCode, b)
	}
	var finding struct {
		State string `json:"state"`
	}
	if err := json.NewDecoder(res.Body).Decode(&finding); err != nil {
		return "", fmt.Errorf("provider: %w", err)
	}
	if finding.State != "accepted" && finding.State != "rejected" {
		return "", fmt.Errorf("provider: no decision in its answer (state %q)", finding.State)
	}
	return finding.State, nil
}
