package projections

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/eventstore"
)

// checkpoint is a projection's progress, stored in projection_checkpoint.
type checkpoint struct {
	version int
	// position is the global position of the last event applied.
	position eventstore.Position
	// events counts the events applied since the last rebuild.
	events         int64
	lastRecordedAt *time.Time
	updatedAt      time.Time
	rebuiltAt      *time.Time
}

const checkpointColumns = `version, position_commit, position_prepare, events, last_recorded_at, updated_at, rebuilt_at`

func scanCheckpoint(row pgx.Row) (checkpoint, error) {
	var (
		cp              checkpoint
		commit, prepare int64
	)
	err := row.Scan(&cp.version, &commit, &prepare, &cp.events, &cp.lastRecordedAt, &cp.updatedAt, &cp.rebuiltAt)
	cp.position = eventstore.Position{Commit: uint64(commit), Prepare: uint64(prepare)}
	return cp, err
}

// ensureCheckpoint returns p's checkpoint, creating it at the start of the
// ledger, with p's code version, when there is none yet.
func ensureCheckpoint(ctx context.Context, pool *pgxpool.Pool, p projection) (checkpoint, error) {
	_, err := pool.Exec(ctx, `INSERT INTO projection_checkpoint (name, version) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING`,
		p.name(), p.version())
	if err != nil {
		return checkpoint{}, fmt.Errorf("projection %s: create checkpoint: %w", p.name(), err)
	}
	cp, err := scanCheckpoint(pool.QueryRow(ctx, `SELECT `+checkpointColumns+` FROM projection_checkpoint WHERE name = $1`, p.name()))
	if err != nil {
		return checkpoint{}, fmt.Errorf("projection %s: read checkpoint: %w", p.name(), err)
	}
	return cp, nil
}

// lockCheckpoint reads p's checkpoint inside tx and locks its row until tx
// ends. Every write of a projection's rows happens under this lock, which
// serializes a runner's batches with a rebuild's swap.
func lockCheckpoint(ctx context.Context, tx pgx.Tx, name string) (checkpoint, error) {
	cp, err := scanCheckpoint(tx.QueryRow(ctx, `SELECT `+checkpointColumns+` FROM projection_checkpoint WHERE name = $1 FOR UPDATE`, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return cp, fmt.Errorf("projection %s: no checkpoint", name)
	}
	if err != nil {
		return cp, fmt.Errorf("projection %s: lock checkpoint: %w", name, err)
	}
	return cp, nil
}

// advance stores the checkpoint after n more events, the last recorded at
// lastRecordedAt, ending at position.
func advance(ctx context.Context, tx pgx.Tx, name string, position eventstore.Position, n int64, lastRecordedAt time.Time) error {
	_, err := tx.Exec(ctx, `UPDATE projection_checkpoint SET position_commit = $2, position_prepare = $3,
		events = events + $4, last_recorded_at = $5, updated_at = now() WHERE name = $1`,
		name, int64(position.Commit), int64(position.Prepare), n, lastRecordedAt)
	if err != nil {
		return fmt.Errorf("projection %s: save checkpoint: %w", name, err)
	}
	return nil
}
