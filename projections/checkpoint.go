package projections

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/storeerr"
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
		return checkpoint{}, storeerr.Wrap(ctx, "projection "+p.name()+": create checkpoint", err)
	}
	cp, err := scanCheckpoint(pool.QueryRow(ctx, `SELECT `+checkpointColumns+` FROM projection_checkpoint WHERE name = $1`, p.name()))
	if err != nil {
		return checkpoint{}, storeerr.Wrap(ctx, "projection "+p.name()+": read checkpoint", err)
	}
	return cp, nil
}

// lockCheckpoints reads the named checkpoints inside tx and locks their
// rows until tx ends, in name order, so that two transactions locking some
// of the same rows never wait for each other in a cycle. Every write of a
// projection's rows happens under this lock, which serializes a runner's
// batches with a rebuild's swap. A name without a checkpoint is an error.
func lockCheckpoints(ctx context.Context, tx pgx.Tx, names []string) (map[string]checkpoint, error) {
	rows, err := tx.Query(ctx, `SELECT name, `+checkpointColumns+` FROM projection_checkpoint
		WHERE name = ANY($1) ORDER BY name FOR UPDATE`, names)
	if err != nil {
		return nil, storeerr.Wrap(ctx, "lock checkpoints", err)
	}
	defer rows.Close()
	out := make(map[string]checkpoint, len(names))
	for rows.Next() {
		var name string
		cp, err := scanCheckpoint(namedRow{rows, &name})
		if err != nil {
			return nil, storeerr.Wrap(ctx, "lock checkpoints", err)
		}
		out[name] = cp
	}
	if err := rows.Err(); err != nil {
		return nil, storeerr.Wrap(ctx, "lock checkpoints", err)
	}
	for _, n := range names {
		if _, ok := out[n]; !ok {
			return nil, fmt.Errorf("projection %s: no checkpoint", n)
		}
	}
	return out, nil
}

// namedRow scans a row whose first column is the checkpoint's name.
type namedRow struct {
	row  pgx.Row
	name *string
}

func (r namedRow) Scan(dest ...any) error { return r.row.Scan(append([]any{r.name}, dest...)...) }

// progress is how far one batch moves one checkpoint: over n more events.
type progress struct {
	name string
	n    int64
}

// advance moves the checkpoints of moved to position, the last event
// recorded at lastRecordedAt, in one statement.
func advance(ctx context.Context, tx pgx.Tx, moved []progress, position eventstore.Position, lastRecordedAt time.Time) error {
	names, ns := make([]string, len(moved)), make([]int64, len(moved))
	for i, m := range moved {
		names[i], ns[i] = m.name, m.n
	}
	_, err := tx.Exec(ctx, `UPDATE projection_checkpoint AS c SET position_commit = $3, position_prepare = $4,
		events = c.events + u.n, last_recorded_at = $5, updated_at = now()
		FROM unnest($1::text[], $2::bigint[]) AS u(name, n) WHERE c.name = u.name`,
		names, ns, int64(position.Commit), int64(position.Prepare), lastRecordedAt)
	if err != nil {
		return storeerr.Wrap(ctx, fmt.Sprintf("save checkpoints %v", names), err)
	}
	return nil
}
