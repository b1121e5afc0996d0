package dbtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/migrations"
)

// EmptySchema returns a pool on a new database of its own whose connections
// use schema, created empty beside the migrated one: for a test that
// applies migrations itself (Apply), as an earlier release or an upgrade
// would.
func EmptySchema(tb testing.TB, schema string) *pgxpool.Pool {
	tb.Helper()
	url := URL(tb)
	admin := PoolOn(tb, url, nil)
	if _, err := admin.Exec(context.Background(), `CREATE SCHEMA `+schema); err != nil {
		tb.Fatalf("dbtest: %v", err)
	}
	return PoolOn(tb, url, func(cfg *pgxpool.Config) { cfg.ConnConfig.RuntimeParams["search_path"] = schema })
}

// Apply applies, in version order on pool, every embedded migration for
// which keep reports true, and fails the test at the first that fails,
// naming it. It returns how many it applied.
func Apply(tb testing.TB, pool *pgxpool.Pool, keep func(m migrations.Migration) bool) int {
	tb.Helper()
	all, err := migrations.All()
	if err != nil {
		tb.Fatalf("dbtest: %v", err)
	}
	n := 0
	for _, m := range all {
		if !keep(m) {
			continue
		}
		if _, err := pool.Exec(context.Background(), m.SQL); err != nil {
			tb.Fatalf("%04d_%s: %v", m.Version, m.Name, err)
		}
		n++
	}
	return n
}
