package projections

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/pglock"
	"github.com/reviewledger/reviewledger/eventstore/storeerr"
)

// Status describes one projection's progress.
type Status struct {
	Projection string
	// Version is the code version of the stored rows; CodeVersion this
	// program's. They differ until the next runner start rebuilds.
	Version, CodeVersion int
	// Exists is false for a projection that never ran.
	Exists   bool
	Position eventstore.Position
	// Events applied since the last rebuild.
	Events    int64
	UpdatedAt time.Time
	RebuiltAt *time.Time
	// LagEvents counts the events after the checkpoint, up to the limit
	// given to Status; LagCapped says the count stopped there.
	LagEvents int64
	LagCapped bool
	// LagSeconds is the age of the oldest event not yet applied, 0 when
	// caught up.
	LagSeconds float64
	// Active is the session holding the projection's run lock: the
	// process running it. Nil when none does.
	Active *pglock.Holder
}

// Status reports the checkpoint and lag of every configured projection,
// counting lag by reading the ledger after each checkpoint, at most
// maxLag events per projection.
func (r *Runner) Status(ctx context.Context, maxLag int64) ([]Status, error) {
	keys := make([]int64, len(r.projections))
	for i, p := range r.projections {
		keys[i] = lockKey("run", p.name())
	}
	holders, err := pglock.Holders(ctx, r.cfg.Pool, keys...)
	if err != nil {
		return nil, storeerr.Wrap(ctx, "status", err)
	}
	var out []Status
	for _, p := range r.projections {
		st := Status{Projection: p.name(), CodeVersion: p.version()}
		if h, ok := holders[lockKey("run", p.name())]; ok {
			st.Active = &h
		}
		cp, err := scanCheckpoint(r.cfg.Pool.QueryRow(ctx, `SELECT `+checkpointColumns+` FROM projection_checkpoint WHERE name = $1`, p.name()))
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return nil, storeerr.Wrap(ctx, "status of "+p.name(), err)
		default:
			st.Exists, st.Version, st.Position, st.Events = true, cp.version, cp.position, cp.events
			st.UpdatedAt, st.RebuiltAt = cp.updatedAt, cp.rebuiltAt
		}
		pos := st.Position
		for st.LagEvents < maxLag {
			recorded, err := r.cfg.Store.ReadAll(ctx, pos, int(min(int64(r.cfg.BatchSize)*10, maxLag-st.LagEvents)))
			if err != nil {
				return nil, fmt.Errorf("status of %s: read ledger: %w", p.name(), err)
			}
			if len(recorded) == 0 {
				break
			}
			if st.LagEvents == 0 {
				st.LagSeconds = max(0, r.cfg.Now().Sub(recorded[0].RecordedAt).Seconds())
			}
			st.LagEvents += int64(len(recorded))
			pos = recorded[len(recorded)-1].Position
		}
		if st.LagEvents >= maxLag && maxLag > 0 {
			if more, err := r.cfg.Store.ReadAll(ctx, pos, 1); err == nil && len(more) > 0 {
				st.LagCapped = true
			}
		}
		out = append(out, st)
	}
	return out, nil
}

// Holder returns the session holding the advisory lock key in the
// runner's database (another election's, such as the deadline sweeper's),
// nil when none does.
func (r *Runner) Holder(ctx context.Context, key int64) (*pglock.Holder, error) {
	holders, err := pglock.Holders(ctx, r.cfg.Pool, key)
	if err != nil {
		return nil, storeerr.Wrap(ctx, "lock holder", err)
	}
	if h, ok := holders[key]; ok {
		return &h, nil
	}
	return nil, nil
}
