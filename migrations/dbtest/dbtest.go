// Package dbtest gives tests their own fully migrated PostgreSQL database.
//
// Use it in any test that needs real storage:
//
//	func TestSomething(t *testing.T) {
//		t.Parallel()
//		pool := dbtest.Pool(t) // fresh database, every migration applied
//		...
//	}
//
// Each call creates a uniquely named database from a template that is migrated
// once (per set of migrations, shared by every test binary through an advisory
// lock), so a test sees only its own rows and never waits for another. The
// pool is closed and the database dropped in t.Cleanup. URL gives the
// database's connection string instead, for code that opens its own
// connections.
//
// The server is TEST_DATABASE_URL, by default
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable; its user must
// be allowed to create databases. When the server cannot be reached the test
// is skipped, except when the environment variable CI is set: then it fails.
//
// At most TEST_DATABASE_SLOTS (default DefaultSlots) test databases are in
// use at once on the machine, across every test binary (slot.go), so that
// a run stays within a stock server's max_connections of 100 however many
// packages go test runs in parallel.
package dbtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/migrations"
)

// DefaultURL is the server used when TEST_DATABASE_URL is not set.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// MaxConns is the size of the pools Pool returns.
const MaxConns = 8

const (
	prefix      = "reviewledger_test_"
	lockKey     = 0x726c74656d706c74 // "rltemplt"
	setupBudget = 60 * time.Second
)

var (
	templateOnce sync.Once
	templateName string
	templateErr  error
)

// Pool returns a pool on a new, fully migrated database of its own.
func Pool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	return PoolWith(tb, nil)
}

// ExecMode sets a pool's query mode.
func ExecMode(mode pgx.QueryExecMode) func(*pgxpool.Config) {
	return func(cfg *pgxpool.Config) { cfg.ConnConfig.DefaultQueryExecMode = mode }
}

// SimpleProtocol sets a pool to pgx's simple protocol (what a connection
// string's default_query_exec_mode=simple_protocol chooses): every
// argument is sent as untyped text.
func SimpleProtocol(cfg *pgxpool.Config) { ExecMode(pgx.QueryExecModeSimpleProtocol)(cfg) }

// PoolWith is Pool with configure (when not nil) applied to the pool's
// configuration first, e.g. SimpleProtocol.
func PoolWith(tb testing.TB, configure func(*pgxpool.Config)) *pgxpool.Pool {
	tb.Helper()
	return PoolOn(tb, URL(tb), configure)
}

// PoolOn opens a pool on url (a database URL returned), with configure
// (when not nil) applied to its configuration first; it is closed in
// tb.Cleanup. Two pools on one database: PoolOn twice with one URL.
func PoolOn(tb testing.TB, url string, configure func(*pgxpool.Config)) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		tb.Fatalf("dbtest: %v", err)
	}
	cfg.MaxConns = MaxConns
	if configure != nil {
		configure(cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), setupBudget)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		tb.Fatalf("dbtest: %v", err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// URL creates a new, fully migrated database and returns its connection
// string. The database is dropped in tb.Cleanup, closing any connection still
// open to it.
func URL(tb testing.TB) string {
	tb.Helper()
	base := baseURL()
	ctx, cancel := context.WithTimeout(context.Background(), setupBudget)
	defer cancel()

	acquireSlot(tb, base)
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		unreachable(tb, base, err)
	}
	defer admin.Close(ctx)

	templateOnce.Do(func() {
		templateName, templateErr = ensureTemplate(ctx, admin)
		if templateErr == nil {
			dropStale(ctx, admin)
		}
	})
	if templateErr != nil {
		tb.Fatalf("dbtest: template database: %v", templateErr)
	}

	name := fmt.Sprintf("%s%d_%s", prefix, time.Now().Unix(), randomHex(6))
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE "+templateName); err != nil {
		tb.Fatalf("dbtest: create database: %v", err)
	}
	tb.Cleanup(func() { drop(tb, base, name) })

	return withDatabase(base, name)
}

func baseURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultURL
}

func unreachable(tb testing.TB, url string, err error) {
	tb.Helper()
	if os.Getenv("CI") != "" {
		tb.Fatalf("dbtest: PostgreSQL at %s is unreachable (CI is set, so this fails): %v", redact(url), err)
	}
	tb.Skipf("dbtest: PostgreSQL at %s is unreachable, skipping: %v", redact(url), err)
}

// ensureTemplate creates and migrates the template database for the embedded
// migrations, unless another process already did. Its name carries a digest
// of the migrations, so a changed migration gets a new template.
func ensureTemplate(ctx context.Context, admin *pgx.Conn) (string, error) {
	all, err := migrations.All()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, m := range all {
		fmt.Fprintf(h, "%d\x00%s\x00%s\x00", m.Version, m.Name, m.SQL)
	}
	name := "reviewledger_template_" + hex.EncodeToString(h.Sum(nil))[:16]

	if _, err := admin.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(lockKey)); err != nil {
		return "", err
	}
	defer admin.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, int64(lockKey)) //nolint:errcheck // closing the connection unlocks too

	var ready bool
	err = admin.QueryRow(ctx, `SELECT datistemplate FROM pg_database WHERE datname = $1`, name).Scan(&ready)
	switch {
	case err == nil && ready:
		return name, nil
	case err == nil:
		// Left half-built by a process that died: start again.
		if _, err := admin.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			return "", err
		}
	case !errors.Is(err, pgx.ErrNoRows):
		return "", err
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", err
	}
	if err := migrate(ctx, withDatabase(admin.Config().ConnString(), name)); err != nil {
		return "", err
	}
	// No connections from now on, so that CREATE DATABASE ... TEMPLATE never
	// finds the template in use.
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+name+" WITH IS_TEMPLATE true ALLOW_CONNECTIONS false"); err != nil {
		return "", err
	}
	return name, nil
}

// staleAfter is the age past which a test database is taken to be left
// behind by a test binary that was killed before its cleanup ran.
const staleAfter = time.Hour

// dropStale drops test databases older than staleAfter, going by the
// creation time in their names. Failures are ignored: it is housekeeping.
func dropStale(ctx context.Context, admin *pgx.Conn) {
	rows, _ := admin.Query(ctx, `SELECT datname FROM pg_database WHERE datname LIKE $1`, prefix+"%")
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return
	}
	for _, name := range names {
		created, _, ok := strings.Cut(strings.TrimPrefix(name, prefix), "_")
		unix, err := strconv.ParseInt(created, 10, 64)
		if !ok || err != nil || time.Since(time.Unix(unix, 0)) < staleAfter {
			continue
		}
		_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	}
}

func migrate(ctx context.Context, url string) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	_, err = migrations.Apply(ctx, pool)
	return err
}

func drop(tb testing.TB, base, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), setupBudget)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err == nil {
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	}
	if err != nil {
		tb.Errorf("dbtest: drop database %s: %v", name, err)
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// withDatabase returns connString naming database db instead of its own.
func withDatabase(connString, db string) string {
	if u, err := url.Parse(connString); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.Path = "/" + db
		return u.String()
	}
	return strings.TrimSpace(connString) + " dbname=" + db
}

func redact(connString string) string {
	if u, err := url.Parse(connString); err == nil && u.Scheme != "" {
		return u.Redacted()
	}
	return "(connection string)"
}

// Querier runs a query: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Explain returns the lines of the plan q makes for sql with args, costs
// left out, for tests of which index a statement reads.
func Explain(tb testing.TB, q Querier, sql string, args ...any) []string {
	tb.Helper()
	rows, err := q.Query(context.Background(), `EXPLAIN (COSTS OFF) `+sql, args...)
	if err != nil {
		tb.Fatalf("explain %s: %v", sql, err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		tb.Fatalf("explain %s: %v", sql, err)
	}
	return lines
}
