package main

// The floors: what the ratio target asks of any service, measured beside
// reviewledger in every round. Each is a server of the same shape run as
// a process of its own (this binary, `reviewledger-bench floor-serve MODE
// CONNS`), on the same HTTP stack (Echo), answering the same submit with
// its own wait through the same instant provider, with the request
// reviewledger's http provider sends:
//
//   - floorAPI stores nothing: the submit's HTTP exchange and the
//     provider call are all it does, so its CPU per review is what the two
//     HTTP exchanges of a review cost, whatever a service stores;
//   - floorTable runs the CRUD baseline's three autocommit statements, on
//     the baseline's table and with as many connections as the baseline
//     has clients: INSERT pending and UPDATE attempts before the provider
//     call, UPDATE state once it answered. The naive table put behind the
//     API.
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
	"strconv"
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

// floorArgs are the arguments after floorCommand that run mode's server
// for a bench with cfg.
func floorArgs(mode string, cfg Config) []string {
	return []string{floorCommand, mode, strconv.Itoa(cfg.CRUDClients)}
}

// floorServe runs a floor's server until SIGTERM or SIGINT, configured as
// serve is (DATABASE_URL, REVIEWLEDGER_ADDR, REVIEWLEDGER_PROVIDER_URL);
// args are the mode and the number of database connections. It returns
// the exit status.
func floorServe(args []string) int {
	fail := func(code int, err error) int {
		fmt.Fprintf(os.Stderr, "reviewledger-bench %s: %v\n", floorCommand, err)
		return code
	}
	if len(args) != 2 || (args[0] != floorAPI && args[0] != floorTable) {
		return fail(2, fmt.Errorf("want the mode (%s or %s) and the connections, got %q", floorAPI, floorTable, args))
	}
	conns, err := strconv.Atoi(args[1])
	if err != nil || conns < 1 {
		return fail(2, fmt.Errorf("connections: want a positive number, got %q", args[1]))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	f, err := newFloor(ctx, args[0], os.Getenv("DATABASE_URL"), os.Getenv("REVIEWLEDGER_PROVIDER_URL"), submitterToken, conns)
	if err != nil {
		return fail(1, err)
	}
	defer f.close()
	e := f.echo()
	served := make(chan error, 1)
	go func() { served <- e.Start(os.Getenv("REVIEWLEDGER_ADDR")) }()
	select {
	case err := <-served:
		return fail(1, fmt.Errorf("REVIEWLEDGER_ADDR: %w", err))
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Shutdown(sctx); err != nil {
		return fail(1, fmt.Errorf("shutdown: %w", err))
	}
	return 0
}

// floorStore is what a floor keeps of a review: submitted runs before the
// provider call, decided after; each returns the time it recorded.
type floorStore interface {
	submitted(ctx context.Context, id string) (time.Time, error)
	decided(ctx context.Context, id, state string) (time.Time, error)
	close()
}

// nothingStored is floorAPI's store.
type nothingStored struct{}

func (nothingStored) submitted(context.Context, string) (time.Time, error) {
	return time.Now(), nil
}

func (nothingStored) decided(context.Context, string, string) (time.Time, error) {
	return time.Now(), nil
}

func (nothingStored) close() {}

// crudTable is floorTable's store: the CRUD baseline's table and
// statements (load.go's crudRound), with the times the view carries read
// back by RETURNING.
type crudTable struct{ pool *pgxpool.Pool }

func (t crudTable) submitted(ctx context.Context, id string) (time.Time, error) {
	var at time.Time
	if err := t.pool.QueryRow(ctx, `INSERT INTO review (id, state, attempts, updated_at) VALUES ($1, 'pending', 0, now()) RETURNING updated_at`,
		id).Scan(&at); err != nil {
		return time.Time{}, fmt.Errorf("insert %s: %w", id, err)
	}
	if _, err := t.pool.Exec(ctx, `UPDATE review SET attempts = attempts + 1, updated_at = now() WHERE id = $1`, id); err != nil {
		return time.Time{}, fmt.Errorf("update the attempts of %s: %w", id, err)
	}
	return at, nil
}

func (t crudTable) decided(ctx context.Context, id, state string) (time.Time, error) {
	var at time.Time
	if err := t.pool.QueryRow(ctx, `UPDATE review SET state = $2, updated_at = now() WHERE id = $1 AND state = 'pending' RETURNING updated_at`,
		id, state).Scan(&at); err != nil {
		return time.Time{}, fmt.Errorf("update the state of %s: %w", id, err)
	}
	return at, nil
}

func (t crudTable) close() { t.pool.Close() }

// floor is one floor's server.
type floor struct {
	store    floorStore
	token    string // the bearer token a submit must carry
	provider string // the provider's URL
	client   *http.Client
}

// newFloor prepares a floor's server; floorTable connects to dbURL with
// conns connections and creates its table.
func newFloor(ctx context.Context, mode, dbURL, providerURL, token string, conns int) (*floor, error) {
	if providerURL == "" {
		return nil, errors.New("REVIEWLEDGER_PROVIDER_URL is not set")
	}
	f := &floor{store: nothingStored{}, token: token, provider: providerURL,
		client: &http.Client{Timeout: 10 * time.Second, Transport: loopbackTransport(256)}}
	if mode != floorTable {
		return f, nil
	}
	pc, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	pc.MaxConns = int32(conns)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	if _, err := pool.Exec(ctx, crudSchema); err != nil {
		pool.Close()
		return nil, fmt.Errorf("DATABASE_URL: create the table: %w", err)
	}
	f.store = crudTable{pool: pool}
	return f, nil
}

// close releases the floor's database connections.
func (f *floor) close() { f.store.close() }

// echo is the floor's HTTP API: the submit, and /healthz. A failed submit
// is logged, and its cause answered, so that the bench can tell it.
func (f *floor) echo() *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.GET("/healthz", func(c echo.Context) error { return c.String(http.StatusOK, "ok") })
	e.POST("/v1/reviews", func(c echo.Context) error {
		err := f.submit(c)
		if err != nil {
			fmt.Fprintf(os.Stderr, "reviewledger-bench %s: %v\n", floorCommand, err)
		}
		return err
	})
	return e
}

// floorView is the part of a review's view the bench reads.
type floorView struct {
	ReviewID    string     `json:"review_id"`
	State       string     `json:"state"`
	SubmittedAt time.Time  `json:"submitted_at"`
	DecidedAt   *time.Time `json:"decided_at"`
}

// floorSubmit is the part of a submit a floor reads.
type floorSubmit struct {
	ReviewID     string `json:"review_id"`
	ContentClass string `json:"content_class"`
	ContentType  string `json:"content_type"`
	Content      string `json:"content"`
}

// submit takes a review, asks the provider and answers its decision.
func (f *floor) submit(c echo.Context) error {
	if c.Request().Header.Get("Authorization") != "Bearer "+f.token {
		return echo.NewHTTPError(http.StatusUnauthorized, "a submitter token is required")
	}
	var in floorSubmit
	if err := json.NewDecoder(c.Request().Body).Decode(&in); err != nil || in.ReviewID == "" {
		return echo.NewHTTPError(http.StatusBadRequest, "review_id: a JSON body naming the review is required")
	}
	ctx := c.Request().Context()
	submitted, err := f.store.submitted(ctx, in.ReviewID)
	if err != nil {
		return echo.NewHTTPError(http.StatusInternalServerError, err.Error()).SetInternal(err)
	}
	state, err := f.ask(ctx, in)
	if err != nil {
		return echo.NewHTTPError(http.StatusBadGateway, err.Error()).SetInternal(err)
	}
	decided, err := f.store.decided(ctx, in.ReviewID, state)
	if err != nil {
		return echo.NewHTTPError(http.StatusInternalServerError, err.Error()).SetInternal(err)
	}
	return c.JSON(http.StatusOK, floorView{ReviewID: in.ReviewID, State: state, SubmittedAt: submitted, DecidedAt: &decided})
}

// ask calls the provider once, as reviewledger's http provider makes an
// attempt (the same body and headers), and returns the state it found.
func (f *floor) ask(ctx context.Context, in floorSubmit) (string, error) {
	body, err := json.Marshal(map[string]any{"review_id": in.ReviewID, "attempt": 1, "content_class": in.ContentClass,
		"content_type": in.ContentType, "content": in.Content})
	if err != nil {
		return "", fmt.Errorf("provider: encode the request: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.provider, bytes.NewReader(body))
	if err != nil {
		return "", fmt.Errorf("provider: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", in.ReviewID)
	req.Header.Set("X-Review-Attempt", "1")
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
		return "", fmt.Errorf("provider: decode the answer: %w", err)
	}
	if finding.State != "accepted" && finding.State != "rejected" {
		return "", fmt.Errorf("provider: no decision in its answer (state %q)", finding.State)
	}
	return finding.State, nil
}
