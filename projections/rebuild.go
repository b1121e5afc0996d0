package projections

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reviewledger/reviewledger/eventstore"
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
	var out []RebuildResult
	for _, p := range ps {
		res, err := r.rebuild(ctx, p)
		if err != nil {
			return out, err
		}
		out = append(out, res)
	}
	return out, nil
}

func (r *Runner) rebuild(ctx context.Context, p projection) (RebuildResult, error) {
	var res RebuildResult
	// One rebuild of a projection at a time: they share the _rebuild tables.
	err := withAdvisoryLock(ctx, r.cfg.Pool, lockKey("rebuild", p.name()), r.cfg.PollInterval, func(*pgx.Conn) error {
		var err error
		res, err = r.rebuildLocked(ctx, p)
		return err
	})
	if err != nil {
		return res, fmt.Errorf("rebuild %s: %w", p.name(), err)
	}
	r.cfg.Logger.Info("projection rebuilt", "projection", p.name(), "version", res.Version,
		"events", res.Events, "position", res.Position.String(), "duration", res.Duration)
	return res, nil
}

func (r *Runner) rebuildLocked(ctx context.Context, p projection) (RebuildResult, error) {
	start := time.Now()
	res := RebuildResult{Projection: p.name(), Version: p.version()}
	if _, err := ensureCheckpoint(ctx, r.cfg.Pool, p); err != nil {
		return res, err
	}
	if err := pgx.BeginFunc(ctx, r.cfg.Pool, func(tx pgx.Tx) error {
		for _, table := range p.tables() {
			shadow := rebuildTables.name(table)
			if _, err := tx.Exec(ctx, `DROP TABLE IF EXISTS `+shadow); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `CREATE TABLE `+shadow+` (LIKE `+liveTables.name(table)+` INCLUDING ALL)`); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return res, dbErr(ctx, "create new tables", err)
	}

	// Build while everyone else goes on using the live tables.
	var (
		pos    eventstore.Position
		lastAt *time.Time
	)
	for {
		recorded, err := r.cfg.Store.ReadAll(ctx, pos, r.cfg.BatchSize)
		if err != nil {
			return res, err
		}
		if len(recorded) == 0 {
			break
		}
		events, _, err := decode(recorded)
		if err != nil {
			return res, err
		}
		if err := pgx.BeginFunc(ctx, r.cfg.Pool, func(tx pgx.Tx) error {
			_, _, err := applyUsed(ctx, tx, p, rebuildTables, events)
			return err
		}); err != nil {
			return res, dbErr(ctx, "apply", err)
		}
		last := recorded[len(recorded)-1]
		pos, lastAt = last.Position, &last.RecordedAt
		res.Events += int64(len(recorded))
	}

	// Swap, holding the checkpoint row: the live runner's next batch waits
	// for this transaction, then finds the checkpoint moved to where the new
	// tables end and carries on from there with the events appended since.
	err := pgx.BeginFunc(ctx, r.cfg.Pool, func(tx pgx.Tx) error {
		if _, err := lockCheckpoints(ctx, tx, []string{p.name()}); err != nil {
			return err
		}
		for _, table := range p.tables() {
			live, shadow, old := liveTables.name(table), rebuildTables.name(table), pgx.Identifier{table + "_old"}.Sanitize()
			for _, stmt := range []string{
				`ALTER TABLE ` + live + ` RENAME TO ` + old,
				`ALTER TABLE ` + shadow + ` RENAME TO ` + live,
				`DROP TABLE ` + old,
			} {
				if _, err := tx.Exec(ctx, stmt); err != nil {
					return dbErr(ctx, "swap "+table, err)
				}
			}
		}
		_, err := tx.Exec(ctx, `UPDATE projection_checkpoint SET version = $2, position_commit = $3, position_prepare = $4,
			events = $5, last_recorded_at = $6, updated_at = now(), rebuilt_at = now() WHERE name = $1`,
			p.name(), p.version(), int64(pos.Commit), int64(pos.Prepare), res.Events, lastAt)
		if err != nil {
			return dbErr(ctx, "save checkpoint", err)
		}
		return nil
	})
	if err != nil {
		return res, dbErr(ctx, "swap", err)
	}
	res.Position, res.Duration = pos, time.Since(start)
	return res, nil
}
