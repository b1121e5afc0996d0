package projections

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/eventstore/clock"
)

// Replica sends the read models' queries (the manual queue's list, the
// SLO, its series, the attempt service times) to a streaming replica of
// the database while it answers as a standby and its replay lag is within
// MaxLag, and to the primary otherwise. A query that fails on the replica
// is made again on the primary at once, and the replica is not used again
// until a check finds it well. Claims, and everything that must read its
// own writes (a review's view and events, decisions), never go to it:
// they are not read models.
type Replica struct {
	primary, replica *pgxpool.Pool
	maxLag           time.Duration
	log              *slog.Logger

	mu sync.Mutex
	st ReplicaStatus
}

// ReplicaStatus is what the last check of the replica found.
type ReplicaStatus struct {
	// Serving is "replica" while the read models' queries go to the
	// replica, "primary" while they fall back to the primary.
	Serving string `json:"serving"`
	// Up: the replica answered the last check, as a standby.
	Up bool `json:"up"`
	// LagBytes is how much WAL the primary has written that the replica
	// has not replayed; LagSeconds the age of the last transaction it
	// replayed while it is behind (0 when caught up).
	LagBytes   int64     `json:"replay_lag_bytes"`
	LagSeconds float64   `json:"replay_lag_seconds"`
	CheckedAt  time.Time `json:"checked_at"`
}

// Serving values.
const (
	ServingReplica = "replica"
	ServingPrimary = "primary"
)

// checkTimeout bounds one check of the replica.
const checkTimeout = time.Second

// NewReplica routes the read models' queries to replica, falling back to
// primary. Until the first Check, queries go to the primary.
func NewReplica(primary, replica *pgxpool.Pool, maxLag time.Duration, log *slog.Logger) *Replica {
	if log == nil {
		log = slog.Default()
	}
	return &Replica{primary: primary, replica: replica, maxLag: maxLag, log: log, st: ReplicaStatus{Serving: ServingPrimary}}
}

// Check measures the replica's replay lag against the primary, decides
// where the read models' queries go, and returns what it found.
func (r *Replica) Check(ctx context.Context) ReplicaStatus {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	st := ReplicaStatus{Serving: ServingPrimary, CheckedAt: time.Now()}
	err := r.measure(ctx, &st)
	if err == nil && st.Up && time.Duration(st.LagSeconds*float64(time.Second)) <= r.maxLag {
		st.Serving = ServingReplica
	}
	r.set(st, err)
	return st
}

func (r *Replica) measure(ctx context.Context, st *ReplicaStatus) error {
	var (
		standby bool
		replay  *string
		ageSecs *float64
	)
	if err := r.replica.QueryRow(ctx, `SELECT pg_is_in_recovery(), pg_last_wal_replay_lsn()::text,
		extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8`).Scan(&standby, &replay, &ageSecs); err != nil {
		return err
	}
	if !standby || replay == nil {
		return errors.New("the read database is not a standby replaying WAL")
	}
	if err := r.primary.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint`, *replay).Scan(&st.LagBytes); err != nil {
		return err
	}
	st.Up, st.LagBytes = true, max(0, st.LagBytes)
	if st.LagBytes > 0 && ageSecs != nil {
		st.LagSeconds = max(0, *ageSecs)
	}
	return nil
}

// set records a check's outcome, logging when the queries move.
func (r *Replica) set(st ReplicaStatus, err error) {
	r.mu.Lock()
	was := r.st.Serving
	r.st = st
	r.mu.Unlock()
	switch {
	case was != st.Serving && st.Serving == ServingReplica:
		r.log.Info("read models are read from the replica", "replay_lag_bytes", st.LagBytes, "replay_lag_seconds", st.LagSeconds)
	case was != st.Serving && err != nil:
		r.log.Warn("read models are read from the primary: the replica fails", "error", err.Error())
	case was != st.Serving:
		r.log.Warn("read models are read from the primary: the replica lags", "replay_lag_bytes", st.LagBytes, "replay_lag_seconds", st.LagSeconds, "max_lag", r.maxLag)
	}
}

// Status returns what the last check found, without checking.
func (r *Replica) Status() ReplicaStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.st
}

// Run checks the replica every interval until ctx is done.
func (r *Replica) Run(ctx context.Context, interval time.Duration) error {
	for {
		r.Check(ctx)
		if err := clock.Sleep(ctx, interval); err != nil {
			return err
		}
	}
}

// pool returns the replica's pool while queries go to it.
func (r *Replica) pool() (*pgxpool.Pool, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.replica, r.st.Serving == ServingReplica
}

// failed sends the queries to the primary until the next check finds the
// replica well.
func (r *Replica) failed(err error) {
	r.mu.Lock()
	st := r.st
	st.Serving, st.Up = ServingPrimary, false
	r.mu.Unlock()
	r.set(st, err)
}

// WithReplica returns a DB whose read-model queries go to r's replica
// while it serves them (claims stay on db's pool, the primary).
func (db *DB) WithReplica(r *Replica) *DB {
	c := *db
	c.replica = r
	return &c
}

// readFrom runs q on the replica while it serves the read models, and
// on the primary when it does not or q fails there.
func readFrom[T any](ctx context.Context, db *DB, q func(*DB) (T, error)) (T, error) {
	if db.replica != nil {
		if pool, ok := db.replica.pool(); ok {
			rdb := *db
			rdb.pool, rdb.replica = pool, nil
			v, err := q(&rdb)
			if err == nil || ctx.Err() != nil || errors.Is(err, ErrInvalidQuery) {
				return v, err
			}
			db.replica.failed(err)
		}
	}
	return q(db)
}
