package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/migrations"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

func TestAll(t *testing.T) {
	all, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) == 0 || all[0].Version != 1 {
		t.Fatalf("first migration: got %+v", all)
	}
	for i := 1; i < len(all); i++ {
		if all[i-1].Version >= all[i].Version {
			t.Fatalf("not in version order: %d before %d", all[i-1].Version, all[i].Version)
		}
	}
}

func TestLoadRefusesBadNames(t *testing.T) {
	for name, fsys := range map[string]fstest.MapFS{
		"no version":     {"event.up.sql": {}},
		"down migration": {"0001_event.down.sql": {}},
		"version zero":   {"0000_event.up.sql": {}},
		"same version":   {"0001_a.up.sql": {}, "0001_b.up.sql": {}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := migrations.Load(fsys); err == nil {
				t.Fatal("loaded")
			}
		})
	}
}

func TestApplyTwiceIsNoop(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t) // already migrated from the template
	ctx := context.Background()

	applied, err := migrations.Apply(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) != 0 {
		t.Fatalf("applied %v to a migrated database", applied)
	}
	status, err := migrations.List(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range status {
		if !s.Applied || s.AppliedAt.IsZero() {
			t.Errorf("%04d_%s not applied", s.Version, s.Name)
		}
	}
}

func TestApplyConcurrently(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	ctx := context.Background()
	// Start from an empty schema of our own, so every migration is pending.
	if _, err := pool.Exec(ctx, `CREATE SCHEMA fresh`); err != nil {
		t.Fatal(err)
	}
	cfg := pool.Config().Copy()
	cfg.ConnConfig.RuntimeParams["search_path"] = "fresh"
	fresh, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fresh.Close)

	status, err := migrations.List(ctx, fresh)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range status {
		if s.Applied {
			t.Fatalf("%04d applied in an empty schema", s.Version)
		}
	}

	all, _ := migrations.All()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total []int
	)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			applied, err := migrations.Apply(ctx, fresh)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			total = append(total, applied...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(total) != len(all) {
		t.Fatalf("four concurrent runs applied %v, want each of %d migrations once", total, len(all))
	}
}

// TestErrorsCarryNoDriverType: the migrator translates the driver's errors.
func TestErrorsCarryNoDriverType(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `ALTER TABLE reviewledger_migration RENAME COLUMN applied_at TO applied`); err != nil {
		t.Fatal(err)
	}
	_, err := migrations.List(ctx, pool)
	var pgErr *pgconn.PgError
	if err == nil || errors.As(err, &pgErr) || !strings.Contains(err.Error(), "applied_at") {
		t.Fatalf("List on a damaged version table: %v (%T)", err, err)
	}
	if _, err := migrations.Apply(ctx, pool); err == nil || errors.As(err, &pgErr) {
		t.Fatalf("Apply on a damaged version table: %v (%T)", err, err)
	}
}

// TestCheck: Check names the database and how far it is migrated, and
// changes nothing.
func TestCheck(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	ctx := context.Background()
	if err := migrations.Check(ctx, pool); err != nil {
		t.Fatalf("a migrated database: %v", err)
	}
	var db string
	if err := pool.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	all, _ := migrations.All()

	// Behind: the last migration not recorded.
	last := all[len(all)-1]
	if _, err := pool.Exec(ctx, `DELETE FROM reviewledger_migration WHERE version = $1`, last.Version); err != nil {
		t.Fatal(err)
	}
	err := migrations.Check(ctx, pool)
	var nm *migrations.NotMigratedError
	if !errors.Is(err, migrations.ErrNotMigrated) || !errors.As(err, &nm) || nm.Missing.Version != last.Version {
		t.Fatalf("behind: %v (%+v)", err, nm)
	}
	if want := fmt.Sprintf("database %s is not migrated (version %d of %d)", db, len(all)-1, len(all)); err.Error() != want {
		t.Fatalf("behind: %q, want %q", err, want)
	}

	// Never migrated: an empty schema of its own stays empty.
	if _, err := pool.Exec(ctx, `CREATE SCHEMA fresh`); err != nil {
		t.Fatal(err)
	}
	cfg := pool.Config().Copy()
	cfg.ConnConfig.RuntimeParams["search_path"] = "fresh"
	fresh, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fresh.Close)
	err = migrations.Check(ctx, fresh)
	if want := fmt.Sprintf("database %s is not migrated (version 0 of %d)", db, len(all)); err == nil || err.Error() != want {
		t.Fatalf("never migrated: %v, want %q", err, want)
	}
	var tables int
	if err := fresh.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'fresh'`).Scan(&tables); err != nil || tables != 0 {
		t.Fatalf("Check created %d tables (%v)", tables, err)
	}
}
