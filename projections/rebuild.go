package projections

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/clock"
	"github.com/reviewledger/reviewledger/eventstore/storeerr"
)

// RebuildResult describes one rebuilt projection.
type RebuildResult struct {
	Projection string
	Version    int
	// Events is how many ledger events the new tables were built from.
	Events   int64
	Position eventstore.Position
	Duration time.Duration
}

// Rebuild recomputes the named projections (every configured one when no
// name is given) from the start of the ledger.
//
// The new rows are built in fresh tables (<table>_rebuild) while readers and
// a running Runner keep using the live ones. The swap then happens in one
// transaction holding the projection's checkpoint row: it renames the new
// tables into place, drops the old ones and sets the checkpoint to where the
// new tables end, so readers see either the old tables or the complete new
// ones. A Runner, in this process or another, notices the moved checkpoint
// and carries on from it with the events appended meanwhile. Claims are not
// projection rows and are kept.
func (r *Runner) Rebuild(ctx context.Context, names ...string) ([]RebuildResult, error) {
	ps := r.projections
	if len(names) > 0 {
		var err error
		if ps, err = lookup(names...); err != nil {
			return nil, err
		}
	}
	ps = inOrder(ps)
	var out []RebuildResult
	err := r.withRebuildLocks(ctx, ps, func() error {
		var err error
		out, err = r.rebuildLocked(ctx, ps)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("rebuild %s: %w", strings.Join(projectionNames(ps), ", "), err)
	}
	for _, res := range out {
		r.cfg.Logger.Info("projection rebuilt", "projection", res.Projection, "version", res.Version,
			"events", res.Events, "position", res.Position.String(), "duration", res.Duration)
	}
	return out, nil
}

// withRebuildLocks runs fn holding the rebuild lock of every projection of
// ps: one rebuild of a projection at a time, as they share the _rebuild
// tables. ps is in the fixed order of all(), so two rebuilds never wait for
// each other's locks in a cycle.
func (r *Runner) withRebuildLocks(ctx context.Context, ps []projection, fn func() error) error {
	if len(ps) == 0 {
		return fn()
	}
	return withAdvisoryLock(ctx, r.cfg.Pool, lockKey("rebuild", ps[0].name()), r.cfg.PollInterval, func(*pgx.Conn) error {
		return r.withRebuildLocks(ctx, ps[1:], fn)
	})
}

// rebuildBatch is a batch of decoded events for the builders.
type rebuildBatch struct {
	events []event
	n      int // events read, decoded or skipped
	last   eventstore.RecordedEvent
}

// rebuildLocked builds the new tables of every projection of ps in one
// pass over the ledger, then swaps them all in at once. The ledger is read
// and decoded once, ahead of the builders; each projection is built on a
// connection of its own, so the projections' writes run side by side. The
// new tables' writes are committed without waiting for the WAL to reach
// disk (synchronous_commit off): nobody reads them before the swap, whose
// own commit waits for the WAL, theirs included, to be durable. Their
// statements are planned for each batch's arguments (planForArguments).
func (r *Runner) rebuildLocked(ctx context.Context, ps []projection) ([]RebuildResult, error) {
	start := time.Now()
	indexes, err := r.createShadows(ctx, ps)
	if err != nil {
		return nil, err
	}
	g, gctx := errgroup.WithContext(ctx)
	feeds := make([]chan rebuildBatch, len(ps))
	for i, p := range ps {
		feeds[i] = make(chan rebuildBatch, 2)
		g.Go(func() error { return r.build(gctx, p, feeds[i]) })
	}
	var (
		total int64
		last  *eventstore.RecordedEvent
	)
	g.Go(func() error {
		defer func() {
			for _, f := range feeds {
				close(f)
			}
		}()
		var pos eventstore.Position
		for {
			recorded, err := r.cfg.Store.ReadAll(gctx, pos, r.cfg.BatchSize)
			if err != nil || len(recorded) == 0 {
				return err
			}
			events, _, err := decode(gctx, r.policies, recorded)
			if err != nil {
				return err
			}
			b := rebuildBatch{events: events, n: len(recorded), last: recorded[len(recorded)-1]}
			for _, f := range feeds {
				select {
				case f <- b:
				case <-gctx.Done():
					return gctx.Err()
				}
			}
			pos, total, last = b.last.Position, total+int64(b.n), &b.last
		}
	})
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if err := r.createIndexes(ctx, indexes); err != nil {
		return nil, err
	}
	var (
		pos    eventstore.Position
		lastAt *time.Time
	)
	if last != nil {
		pos, lastAt = last.Position, &last.RecordedAt
	}
	if err := r.swap(ctx, ps, pos, lastAt, total); err != nil {
		return nil, err
	}
	out := make([]RebuildResult, len(ps))
	for i, p := range ps {
		out[i] = RebuildResult{Projection: p.name(), Version: p.version(), Events: total, Position: pos, Duration: time.Since(start)}
	}
	return out, nil
}

// createShadows creates empty new tables beside the live ones of every
// projection of ps, with their primary keys and unique indexes (the
// builders' upserts need them) but without their other indexes, which are
// built once the tables are full (createIndexes): quicker than keeping
// them up to date row by row. It returns those indexes' definitions.
func (r *Runner) createShadows(ctx context.Context, ps []projection) (indexes []string, err error) {
	for _, p := range ps {
		if _, err := ensureCheckpoint(ctx, r.cfg.Pool, p); err != nil {
			return nil, err
		}
	}
	err = pgx.BeginFunc(ctx, r.cfg.Pool, func(tx pgx.Tx) error {
		for _, p := range ps {
			for _, table := range p.tables() {
				shadow := rebuildTables.name(table)
				if _, err := tx.Exec(ctx, `DROP TABLE IF EXISTS `+shadow); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, `CREATE TABLE `+shadow+` (LIKE `+liveTables.name(table)+` INCLUDING ALL)`); err != nil {
					return err
				}
				deferred, err := dropSecondaryIndexes(ctx, tx, shadow)
				if err != nil {
					return err
				}
				indexes = append(indexes, deferred...)
			}
		}
		return nil
	})
	if err != nil {
		return nil, storeerr.Wrap(ctx, "create new tables", err)
	}
	return indexes, nil
}

// dropSecondaryIndexes drops the indexes of table that are neither its
// primary key nor unique, and returns their definitions.
func dropSecondaryIndexes(ctx context.Context, tx pgx.Tx, table string) ([]string, error) {
	rows, _ := tx.Query(ctx, `SELECT indexrelid::regclass::text, pg_get_indexdef(indexrelid) FROM pg_index
		WHERE indrelid = $1::regclass AND NOT indisunique AND NOT indisprimary ORDER BY indexrelid`, table)
	type index struct{ Name, Def string }
	found, err := pgx.CollectRows(rows, pgx.RowToStructByPos[index])
	if err != nil {
		return nil, err
	}
	defs := make([]string, len(found))
	for i, ix := range found {
		if _, err := tx.Exec(ctx, `DROP INDEX `+ix.Name); err != nil {
			return nil, err
		}
		defs[i] = ix.Def
	}
	return defs, nil
}

// createIndexes builds the deferred indexes of the new tables, two at a
// time (nobody reads the new tables yet).
func (r *Runner) createIndexes(ctx context.Context, defs []string) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(2)
	for _, def := range defs {
		g.Go(func() error {
			if _, err := r.cfg.Pool.Exec(gctx, def); err != nil {
				return storeerr.Wrap(gctx, "create index", err)
			}
			return nil
		})
	}
	return g.Wait()
}

// build applies the batches of feed, in order, to p's new tables.
func (r *Runner) build(ctx context.Context, p projection, feed <-chan rebuildBatch) error {
	for b := range feed {
		err := pgx.BeginFunc(ctx, r.cfg.Pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL synchronous_commit = off`); err != nil {
				return err
			}
			if err := planForArguments(ctx, tx); err != nil {
				return err
			}
			_, _, err := applyUsed(ctx, tx, p, rebuildTables, b.events)
			return err
		})
		if err != nil {
			return storeerr.Wrap(ctx, "apply "+p.name(), err)
		}
	}
	return nil
}

// swap puts the new tables of every projection of ps in place of the live
// ones in one transaction, holding their checkpoint rows: a live runner's
// next batch waits for it, then finds its checkpoint moved to where the
// new tables end and carries on from there with the events appended since.
//
// Readers of the live tables are never made to wait behind a swap that
// waits for them: the swap takes every live table's lock at once, and when
// it cannot have them within swapLockTimeout (a reader holds one) it lets
// go of everything and tries again.
func (r *Runner) swap(ctx context.Context, ps []projection, pos eventstore.Position, lastAt *time.Time, events int64) error {
	var live []string
	for _, p := range ps {
		for _, table := range p.tables() {
			live = append(live, liveTables.name(table))
		}
	}
	for {
		err := pgx.BeginFunc(ctx, r.cfg.Pool, func(tx pgx.Tx) error {
			if _, err := lockCheckpoints(ctx, tx, projectionNames(ps)); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = `+strconv.Itoa(int(swapLockTimeout.Milliseconds()))); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `LOCK TABLE `+strings.Join(live, ", ")+` IN ACCESS EXCLUSIVE MODE`); err != nil {
				return err
			}
			for _, p := range ps {
				if err := swapTables(ctx, tx, p, pos, lastAt, events); err != nil {
					return err
				}
			}
			return nil
		})
		if !lockTimedOut(err) {
			if err != nil {
				return storeerr.Wrap(ctx, "swap", err)
			}
			return nil
		}
		if err := clock.Sleep(ctx, swapLockTimeout); err != nil {
			return err
		}
	}
}

// swapLockTimeout bounds how long a swap waits for the live tables' locks
// before it lets go and tries again.
const swapLockTimeout = 200 * time.Millisecond

// lockTimedOut reports whether err is PostgreSQL's lock_not_available.
func lockTimedOut(err error) bool {
	return storeerr.Code(err) == storeerr.CodeLockNotAvailable
}

// swapTables renames p's new tables into place, drops the old ones and
// moves p's checkpoint to where the new tables end.
func swapTables(ctx context.Context, tx pgx.Tx, p projection, pos eventstore.Position, lastAt *time.Time, events int64) error {
	for _, table := range p.tables() {
		live, shadow, old := liveTables.name(table), rebuildTables.name(table), pgx.Identifier{table + "_old"}.Sanitize()
		for _, stmt := range []string{
			`ALTER TABLE ` + live + ` RENAME TO ` + old,
			`ALTER TABLE ` + shadow + ` RENAME TO ` + live,
			`DROP TABLE ` + old,
		} {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return fmt.Errorf("swap %s: %w", table, err)
			}
		}
	}
	_, err := tx.Exec(ctx, `UPDATE projection_checkpoint SET version = $2, position_commit = $3, position_prepare = $4,
		events = $5, last_recorded_at = $6, updated_at = now(), rebuilt_at = now() WHERE name = $1`,
		p.name(), p.version(), int64(pos.Commit), int64(pos.Prepare), events, lastAt)
	if err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	return nil
}

// inOrder is the projections of ps once each, in the order of all().
func inOrder(ps []projection) []projection {
	var out []projection
	for _, p := range all() {
		if slices.ContainsFunc(ps, func(q projection) bool { return q.name() == p.name() }) {
			out = append(out, p)
		}
	}
	return out
}

// projectionNames is the names of ps, in order.
func projectionNames(ps []projection) []string {
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.name()
	}
	return names
}
