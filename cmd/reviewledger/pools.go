package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/eventstore/pglock"
	"github.com/reviewledger/reviewledger/eventstore/storeerr"
	"github.com/reviewledger/reviewledger/projections"
)

// minPoolConns is the smallest main pool a budget may leave: a claim and
// a group commit in flight at once.
const minPoolConns = 2

// PoolConfig is the connection budget of a serve process. Its default, 32,
// leaves a process running every role the 24 connections its pool has
// always had beside the sessions its roles hold.
type PoolConfig struct {
	DBMaxConns int `name:"db-max-conns" env:"REVIEWLEDGER_DB_MAX_CONNS" default:"32" help:"Server sessions this process may hold in all: the sessions its roles hold (elections, LISTEN, the session pool), REVIEWLEDGER_READ_DATABASE_URL's pool (a quarter, 2 to 8) and DATABASE_URL's pool (the rest). A pool_max_conns in a URL sizes that pool, and the whole must still fit."`
}

// connBudget is how a process shares REVIEWLEDGER_DB_MAX_CONNS.
type connBudget struct {
	Held int // sessions held outside any pool: elections and LISTEN
	Sess int // the session pool: the migration lock, then the audit signing lock
	Read int // REVIEWLEDGER_READ_DATABASE_URL's pool, 0 without one
	Pool int // DATABASE_URL's pool
}

// Total is every server session the process may hold.
func (b connBudget) Total() int { return b.Held + b.Sess + b.Read + b.Pool }

// heldSessions counts the sessions the process's roles hold on
// connections of their own (REVIEWLEDGER_SESSION_DATABASE_URL): the
// event store's LISTEN, one advisory-lock election per sweeper candidacy,
// per projection and for the webhook sender.
func (c *ServeCmd) heldSessions() int {
	n := 0
	if c.Store.Backend != backendKurrentDB {
		n++ // LISTEN
	}
	if c.runs(roleSweeper) || (c.runs(roleWorker) && c.WorkerSweeps) {
		n++
	}
	if c.runs(roleProjector) {
		n += len(projections.Names())
		if c.Notify.enabled() {
			n++
		}
	}
	return n
}

// budget shares REVIEWLEDGER_DB_MAX_CONNS between the process's sessions
// and pools. The error names the setting and the figures.
func (c *ServeCmd) budget() (connBudget, error) {
	const setting = "REVIEWLEDGER_DB_MAX_CONNS"
	b := connBudget{Held: c.heldSessions(), Sess: 1}
	if c.Pools.DBMaxConns <= 0 {
		return b, fmt.Errorf("%s: must be a positive number of server sessions, got %d", setting, c.Pools.DBMaxConns)
	}
	if c.ReadURL != "" {
		b.Read = min(max(c.Pools.DBMaxConns/4, 2), 8)
		if n, ok := urlMaxConns(c.ReadURL); ok {
			b.Read = n
		}
	}
	b.Pool = c.Pools.DBMaxConns - b.Held - b.Sess - b.Read
	if n, ok := urlMaxConns(c.DatabaseURL); ok {
		b.Pool = n
	}
	if b.Pool < minPoolConns || b.Total() > c.Pools.DBMaxConns {
		return b, fmt.Errorf("%s: %d server sessions do not hold this process's roles (%s): %d held by its elections and LISTEN, 1 session pool, %d for the read pool and at least %d for DATABASE_URL's pool; raise it to %d",
			setting, c.Pools.DBMaxConns, strings.Join(c.Roles, ","), b.Held, b.Read, max(b.Pool, minPoolConns), b.Held+b.Sess+b.Read+max(b.Pool, minPoolConns))
	}
	return b, nil
}

// urlMaxConns is the pool_max_conns a connection URL sets, if it sets one.
func urlMaxConns(url string) (int, bool) {
	if !strings.Contains(url, "pool_max_conns") {
		return 0, false
	}
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return 0, false
	}
	return int(pc.MaxConns), true
}

// sessionURL is where session features connect: the advisory-lock
// elections, LISTEN, the migration and audit signing locks.
func (c *Config) sessionURL() string {
	if c.SessionURL != "" {
		return c.SessionURL
	}
	return c.DatabaseURL
}

// sessionPooled is the error of a session URL that reaches a pooler.
func (c *Config) sessionPooled() error {
	if c.SessionURL == "" {
		return errors.New("DATABASE_URL: reaches a connection pooler, which keeps no session for advisory locks and LISTEN: set REVIEWLEDGER_SESSION_DATABASE_URL to the PostgreSQL server itself")
	}
	return errors.New("REVIEWLEDGER_SESSION_DATABASE_URL: reaches a connection pooler, which keeps no session for advisory locks and LISTEN: name the PostgreSQL server itself")
}

// mainPoolConfig is DATABASE_URL's pool configuration. When DATABASE_URL
// reaches a transaction pooler (pooler) and names no
// default_query_exec_mode, its statements run in cache_describe mode; one
// that names cache_statement there is refused. Missing prepared
// statements are reported naming the setting.
func (c *Config) mainPoolConfig(ctx context.Context, log *slog.Logger) (*pgxpool.Config, error) {
	pc, err := c.parseMain(log)
	if err != nil {
		return nil, err
	}
	pooled, err := pooler(ctx, pc.ConnConfig)
	if err != nil || !pooled {
		return pc, nil // the pool's own connection errors say what is wrong
	}
	return pc, c.forPooler(pc)
}

// parseMain is DATABASE_URL's pool configuration as it names it, with the
// tracer that reports missing prepared statements.
func (c *Config) parseMain(log *slog.Logger) (*pgxpool.Config, error) {
	pc, err := pgxpool.ParseConfig(c.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	pc.ConnConfig.Tracer = &pooledStatements{log: log}
	return pc, nil
}

// forPooler sets pc, DATABASE_URL's configuration, up for a transaction
// pooler, or refuses it.
func (c *Config) forPooler(pc *pgxpool.Config) error {
	switch {
	case !strings.Contains(c.DatabaseURL, "default_query_exec_mode"):
		// A transaction pooler hands each statement outside a transaction
		// to any server session: prepared statements would go missing.
		// Descriptions cached per connection need none, in one round trip.
		pc.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	case pc.ConnConfig.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement:
		return errors.New("DATABASE_URL: reaches a connection pooler, which keeps no prepared statement: drop default_query_exec_mode=cache_statement (cache_describe is then the default)")
	}
	return nil
}

// pooler reports whether cc reaches a connection pooler rather than a
// server session of its own: PgBouncer answers the startup with a
// process ID of its own making, the server with its backend's.
func pooler(ctx context.Context, cc *pgx.ConnConfig) (bool, error) {
	probe := cc.Copy()
	probe.Tracer = nil
	probe.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	conn, err := pgx.ConnectConfig(ctx, probe)
	if err != nil {
		return false, err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	return pooledConn(ctx, conn)
}

// pooledConn reports whether conn is a pooler's rather than a server
// session of its own (pooler), asking in the simple protocol, which
// prepares nothing.
func pooledConn(ctx context.Context, conn *pgx.Conn) (bool, error) {
	var pid uint32
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`, pgx.QueryExecModeSimpleProtocol).Scan(&pid); err != nil {
		return false, err
	}
	return pid != conn.PgConn().PID(), nil
}

// pools are the connection pools of a serve process.
type pools struct {
	Main     *pgxpool.Pool // DATABASE_URL: ordinary traffic
	Sessions *pgxpool.Pool // REVIEWLEDGER_SESSION_DATABASE_URL: session features
	Read     *pgxpool.Pool // REVIEWLEDGER_READ_DATABASE_URL, nil without one
}

// Close closes every pool.
func (p pools) Close() {
	for _, pool := range []*pgxpool.Pool{p.Read, p.Sessions, p.Main} {
		if pool != nil {
			pool.Close()
		}
	}
}

// openPools opens the process's pools sized by b.
func (c *ServeCmd) openPools(ctx context.Context, b connBudget, log *slog.Logger) (pools, error) {
	var p pools
	pc, err := c.mainPoolConfig(ctx, log)
	if err != nil {
		return p, err
	}
	pc.MaxConns = int32(b.Pool)
	named(pc)
	if p.Main, err = newResettingPool(ctx, pc); err != nil {
		return p, fmt.Errorf("DATABASE_URL: %w", err)
	}
	sc, err := pgxpool.ParseConfig(c.sessionURL())
	if err != nil {
		p.Close()
		return p, fmt.Errorf("REVIEWLEDGER_SESSION_DATABASE_URL: %w", err)
	}
	if pooled, err := pooler(ctx, sc.ConnConfig); err == nil && pooled {
		p.Close()
		return p, c.sessionPooled()
	}
	sc.MaxConns = int32(b.Sess)
	named(sc)
	if p.Sessions, err = newResettingPool(ctx, sc); err != nil {
		p.Close()
		return p, fmt.Errorf("REVIEWLEDGER_SESSION_DATABASE_URL: %w", err)
	}
	if c.ReadURL != "" {
		if p.Read, err = openReadPool(ctx, c.ReadURL, b.Read); err != nil {
			p.Close()
			return p, err
		}
	}
	return p, nil
}

// named gives pc's sessions the process's application_name (the one its
// election sessions have, pglock.AppName) unless the URL names one, so
// that pg_stat_activity shows which process holds each.
func named(pc *pgxpool.Config) {
	if pc.ConnConfig.RuntimeParams["application_name"] == "" {
		pc.ConnConfig.RuntimeParams["application_name"] = pglock.AppName()
	}
}

// pooledStatements is a tracer of DATABASE_URL's pool that says, once and
// in one line naming the setting, what is wrong when prepared statements
// go missing: DATABASE_URL reaches a transaction pooler while its
// connections cache prepared statements.
type pooledStatements struct {
	log  *slog.Logger
	said atomic.Bool
}

// check looks for the SQLSTATEs of a prepared statement that is not on
// the server session it was prepared on: what a transaction pooler does to
// pgx's statement cache.
func (t *pooledStatements) check(conn *pgx.Conn, err error) {
	code := storeerr.Code(err)
	if code != storeerr.CodeInvalidSQLStatementName && code != storeerr.CodeDuplicatePreparedStatement {
		return
	}
	if conn == nil || conn.Config().DefaultQueryExecMode != pgx.QueryExecModeCacheStatement || !t.said.CompareAndSwap(false, true) {
		return
	}
	t.log.Error("DATABASE_URL: prepared statements go missing between statements, so it reaches a transaction pooler (PgBouncer pool_mode=transaction); drop default_query_exec_mode from DATABASE_URL (cache_describe is the default through a pooler) or name cache_describe",
		"sqlstate", code, "error", storeerr.Message(err))
}

// TraceQueryStart implements pgx.QueryTracer.
func (t *pooledStatements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer.
func (t *pooledStatements) TraceQueryEnd(_ context.Context, conn *pgx.Conn, data pgx.TraceQueryEndData) {
	t.check(conn, data.Err)
}
