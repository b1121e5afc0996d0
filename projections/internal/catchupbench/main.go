// Command catchupbench measures how fast the projections catch up on a
// ledger of a million events, beside a plain sequential read of the same
// events, and prints the figures recorded in docs/benchmarks.md.
//
//	go run ./projections/internal/catchupbench -events 1000000
//
// It works in a schema of its own (created, migrated and dropped again) in
// the database named by -database or DATABASE_URL; the ledger is in memory
// (or, with -store pgstore, copied into the schema's event table), so the
// figures isolate the projections' own cost.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/cmd/benchtarget"
	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/memstore"
	"github.com/reviewledger/reviewledger/eventstore/pgstore"
	"github.com/reviewledger/reviewledger/migrations"
	"github.com/reviewledger/reviewledger/projections"
	"github.com/reviewledger/reviewledger/projections/internal/workload"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "catchupbench:", err)
		os.Exit(1)
	}
}

func run() error {
	defURL := os.Getenv("DATABASE_URL")
	if defURL == "" {
		defURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	var (
		url     = flag.String("database", defURL, "PostgreSQL connection string (DATABASE_URL)")
		events  = flag.Int("events", 1_000_000, "ledger events to project, at least")
		batch   = flag.Int("batch", 5000, "projection batch size")
		writers = flag.Int("writers", 2, "concurrent writers generating the ledger")
		seed    = flag.Uint64("seed", 1, "workload seed")
		profile = flag.String("cpuprofile", "", "write a CPU profile of the catch-up runs to this file")
		backend = flag.String("store", "memstore", "ledger the projections read: memstore, or pgstore (the generated events copied into the PostgreSQL event table)")
	)
	flag.Parse()
	if *events < 1 {
		return errors.New("-events: must be positive")
	}
	if *backend != "memstore" && *backend != "pgstore" {
		return fmt.Errorf("-store: must be memstore or pgstore, got %q", *backend)
	}
	ctx := context.Background()

	pool, cleanup, err := schema(ctx, *url)
	if err != nil {
		return err
	}
	defer cleanup()

	store := memstore.New()
	l := ledger.New(store)
	t0 := time.Now()
	var total int64
	for i := 0; total < int64(*events); i++ {
		// About 4.4 events per review; top up until there are enough.
		need := int(float64(int64(*events)-total)/4.3) + 1
		st, err := workload.Run(ctx, l, workload.Config{Reviews: need, Prefix: fmt.Sprintf("r%d-", i), Writers: *writers, Seed: *seed + uint64(i)})
		if err != nil {
			return fmt.Errorf("generate ledger: %w", err)
		}
		total += st.Events
	}
	fmt.Printf("ledger: %d events generated in %s (memstore)\n", total, time.Since(t0).Round(time.Millisecond))
	fmt.Printf("machine: %d CPUs, %s\n", runtime.NumCPU(), runtime.Version())

	var source eventstore.Store = store
	if *backend == "pgstore" {
		t0 := time.Now()
		if err := copyEvents(ctx, pool, store); err != nil {
			return err
		}
		pg := pgstore.New(pool, pgstore.Config{})
		defer pg.Close()
		source = pg
		fmt.Printf("ledger copied into the PostgreSQL event table in %s; reading through pgstore\n", time.Since(t0).Round(time.Millisecond))
	}

	// The plain sequential read of the same events.
	t0 = time.Now()
	n, err := readAll(ctx, source, *batch)
	if err != nil {
		return err
	}
	read := time.Since(t0)
	fmt.Printf("plain read: %d events in %s: %.0f events/s\n", n, read.Round(time.Millisecond), float64(n)/read.Seconds())

	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if *profile != "" {
		f, err := os.Create(*profile)
		if err != nil {
			return fmt.Errorf("-cpuprofile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("-cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	var sum time.Duration
	for _, name := range projections.Names() {
		r, err := projections.NewRunner(projections.Config{Pool: pool, Store: source, Projections: []string{name}, BatchSize: *batch, Logger: quiet})
		if err != nil {
			return err
		}
		t0 := time.Now()
		if err := r.CatchUp(ctx); err != nil {
			return err
		}
		d := time.Since(t0)
		sum += d
		rate := float64(n) / d.Seconds()
		fmt.Printf("catch-up %-15s %d events in %s: %.0f events/s  %s\n", name, n, d.Round(time.Millisecond), rate, benchtarget.Verdict(rate, catchUpTarget))
	}
	perProjection := float64(n) * float64(len(projections.Names())) / sum.Seconds()
	fmt.Printf("catch-up all, one after another: %s: %.0f events/s per projection  %s\n", sum.Round(time.Millisecond), perProjection, benchtarget.Verdict(perProjection, catchUpTarget))

	// All of them at once, as a serving process runs them (one shared
	// batch: one read and one transaction per batch for them all): from
	// zero again.
	if _, err := pool.Exec(ctx, `TRUNCATE projection_checkpoint, `+strings.Join(projections.Tables(), ", ")); err != nil {
		return err
	}
	r, err := projections.NewRunner(projections.Config{Pool: pool, Store: source, BatchSize: *batch, Logger: quiet})
	if err != nil {
		return err
	}
	t0 = time.Now()
	if err := r.CatchUpConcurrently(ctx); err != nil {
		return err
	}
	d := time.Since(t0)
	rate := float64(n) / d.Seconds()
	fmt.Printf("catch-up all together: %d events in %s: %.0f events/s (every projection current)  %s\n", n, d.Round(time.Millisecond), rate, benchtarget.Verdict(rate, catchUpTarget))

	// A rebuild of every read model, as `reviewledger projections
	// rebuild` runs it: new tables built from zero beside the live ones,
	// then swapped in.
	t0 = time.Now()
	if _, err := r.Rebuild(ctx); err != nil {
		return err
	}
	d = time.Since(t0)
	rate = float64(n) / d.Seconds()
	fmt.Printf("rebuild of every projection: %d events in %s: %.0f events/s  %s\n", n, d.Round(time.Millisecond), rate, benchtarget.Verdict(rate, rebuildTarget))
	return nil
}

// rebuildTarget is the least rate, in ledger events per second, of a
// rebuild of every read model (docs/benchmarks.md).
const rebuildTarget = 100000

// catchUpTarget is the least catch-up rate, in events per second, that
// each projection, and all of them together, are meant to keep
// (docs/benchmarks.md).
const catchUpTarget = 50000

// copyEvents copies every event of from into the event table, in global
// order, as one transaction: quicker than a million appends, and read back
// by pgstore exactly as appended events are.
func copyEvents(ctx context.Context, pool *pgxpool.Pool, from eventstore.Store) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var pos eventstore.Position
		for {
			evs, err := from.ReadAll(ctx, pos, 10000)
			if err != nil {
				return err
			}
			if len(evs) == 0 {
				return nil
			}
			rows := make([][]any, len(evs))
			for i, e := range evs {
				rows[i] = []any{e.Stream, int64(e.Revision), e.ID, e.Type, e.Data, e.Metadata, e.RecordedAt}
			}
			if _, err := tx.CopyFrom(ctx, pgx.Identifier{"event"},
				[]string{"stream", "revision", "id", "type", "data", "metadata", "recorded_at"}, pgx.CopyFromRows(rows)); err != nil {
				return fmt.Errorf("copy events: %w", err)
			}
			pos = evs[len(evs)-1].Position
		}
	})
}

func readAll(ctx context.Context, store eventstore.Store, batch int) (int64, error) {
	var (
		pos eventstore.Position
		n   int64
	)
	for {
		evs, err := store.ReadAll(ctx, pos, batch)
		if err != nil {
			return n, err
		}
		if len(evs) == 0 {
			return n, nil
		}
		n += int64(len(evs))
		pos = evs[len(evs)-1].Position
	}
}

// schema creates and migrates a schema of its own and returns a pool using
// it, and a function dropping it.
func schema(ctx context.Context, url string) (*pgxpool.Pool, func(), error) {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "catchupbench_" + hex.EncodeToString(b)
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, nil, fmt.Errorf("-database: %w", err)
	}
	if _, err := admin.Exec(ctx, `CREATE SCHEMA `+name); err != nil {
		admin.Close(ctx)
		return nil, nil, err
	}
	drop := func() {
		_, _ = admin.Exec(context.Background(), `DROP SCHEMA `+name+` CASCADE`)
		admin.Close(context.Background())
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		drop()
		return nil, nil, fmt.Errorf("-database: %w", err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = name
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		drop()
		return nil, nil, err
	}
	if _, err := migrations.Apply(ctx, pool); err != nil {
		pool.Close()
		drop()
		return nil, nil, fmt.Errorf("migrate: %w", err)
	}
	return pool, func() { pool.Close(); drop() }, nil
}
