package projections

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/memstore"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
	"github.com/reviewledger/reviewledger/projections/internal/workload"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// env is a migrated database of its own and an in-memory ledger.
type env struct {
	pool   *pgxpool.Pool
	store  eventstore.Store
	ledger *ledger.Ledger
	db     *DB
}

func newEnv(t *testing.T) *env {
	t.Helper()
	pool := dbtest.Pool(t)
	store := memstore.New()
	return &env{pool: pool, store: store, ledger: ledger.New(store), db: NewDB(pool)}
}

// newTracedEnv is newEnv with every statement the pool's connections send
// (the lock connections' included) recorded.
func newTracedEnv(t *testing.T) (*env, *statements) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dbtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = dbtest.MaxConns
	sql := &statements{}
	cfg.ConnConfig.Tracer = sql
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := memstore.New()
	return &env{pool: pool, store: store, ledger: ledger.New(store), db: NewDB(pool)}, sql
}

// statements is a pgx tracer recording the SQL of every statement, those
// sent in a pgx.Batch one by one.
type statements struct {
	mu  sync.Mutex
	sql []string
}

func (s *statements) add(sql string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sql = append(s.sql, sql)
}

// take returns the statements recorded since the last take.
func (s *statements) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.sql
	s.sql = nil
	return out
}

func (s *statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	s.add(d.SQL)
	return ctx
}

func (s *statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (s *statements) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (s *statements) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	s.add(d.SQL)
}

func (s *statements) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// matching returns the statements containing every one of words.
func matching(sql []string, words ...string) []string {
	var out []string
	for _, q := range sql {
		ok := true
		for _, w := range words {
			ok = ok && strings.Contains(q, w)
		}
		if ok {
			out = append(out, q)
		}
	}
	return out
}

func (e *env) runner(t *testing.T, mod func(*Config)) *Runner {
	t.Helper()
	cfg := Config{Pool: e.pool, Store: e.store, BatchSize: 53, PollInterval: 20 * time.Millisecond, RetryDelay: 10 * time.Millisecond, Logger: quiet}
	if mod != nil {
		mod(&cfg)
	}
	r, err := NewRunner(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (e *env) workload(t *testing.T, cfg workload.Config) workload.Stats {
	t.Helper()
	st, err := workload.Run(context.Background(), e.ledger, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// dump returns every row of every projection table, as text, sorted.
func dump(t *testing.T, pool *pgxpool.Pool) map[string][]string {
	t.Helper()
	out, err := Dump(context.Background(), pool)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func diff(t *testing.T, what string, got, want map[string][]string) {
	t.Helper()
	for table, w := range want {
		g := got[table]
		if slices.Equal(g, w) {
			continue
		}
		var missing, extra []string
		for _, l := range w {
			if !slices.Contains(g, l) {
				missing = append(missing, l)
			}
		}
		for _, l := range g {
			if !slices.Contains(w, l) {
				extra = append(extra, l)
			}
		}
		t.Errorf("%s: table %s: %d rows, want %d\nmissing:\n  %s\nextra:\n  %s", what, table, len(g), len(w),
			strings.Join(first(missing, 5), "\n  "), strings.Join(first(extra, 5), "\n  "))
	}
}

func first(s []string, n int) []string { return s[:min(n, len(s))] }

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}
