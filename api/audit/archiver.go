package audit

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// archiveBatch bounds the checkpoints one round archives.
const archiveBatch = 1000

// archiver puts the database's checkpoints into an archive, catching up on
// whatever the archive lacks.
type archiver struct {
	archive CheckpointArchive
	db      PGCheckpoints
	log     *slog.Logger

	mu     sync.Mutex
	known  bool  // cursor was read from the archive
	cursor int64 // the highest seq archived

	failures prometheus.Counter
	last     prometheus.Gauge
}

func newArchiver(a CheckpointArchive, db PGCheckpoints, reg prometheus.Registerer, log *slog.Logger) (*archiver, error) {
	ar := &archiver{archive: a, db: db, log: log,
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reviewledger_audit_witness_failures_total",
			Help: "Rounds in which signed audit checkpoints could not be archived to the witness (REVIEWLEDGER_AUDIT_WITNESS_DIR); the log says why, a later round catches up.",
		}),
		last: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "reviewledger_audit_witness_last_seq",
			Help: "The highest seq of the signed audit checkpoints this process archived to the witness, or found there.",
		}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{ar.failures, ar.last} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("audit witness metrics: %w", err)
			}
		}
	}
	return ar, nil
}

// catchUp archives the stored checkpoints the archive lacks; a failure is
// logged and counted, and the next call starts again from what the
// archive holds.
func (a *archiver) catchUp(ctx context.Context) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.round(ctx); err != nil && ctx.Err() == nil {
		a.known = false
		a.failures.Inc()
		a.log.Error("audit witness: checkpoints not archived", "witness", a.archive.Name(), "err", err)
	}
}

// round puts every stored checkpoint from the cursor on. The checkpoint
// at the cursor is put again, so that a database whose chain no longer
// is the archive's (restored to an earlier point and signed on) is found
// at once: Put refuses a different checkpoint under a seq.
func (a *archiver) round(ctx context.Context) error {
	if !a.known {
		last, err := a.archive.Last(ctx)
		if err != nil {
			return fmt.Errorf("read %s: %w", a.archive.Name(), err)
		}
		a.cursor, a.known = last, true
		a.last.Set(float64(last))
	}
	latest, ok, err := a.db.latest(ctx)
	if err != nil || !ok {
		return err
	}
	batch, err := a.db.from(ctx, min(a.cursor, latest.Seq), archiveBatch)
	if err != nil {
		return err
	}
	for _, st := range batch {
		if err := a.archive.Put(ctx, st); err != nil {
			return fmt.Errorf("checkpoint #%d: %w", st.Seq, err)
		}
		if st.Seq > a.cursor {
			a.cursor = st.Seq
			a.last.Set(float64(st.Seq))
		}
	}
	if latest.Seq < a.cursor {
		return fmt.Errorf("the database's latest checkpoint is #%d, the witness's #%d: the database lost checkpoints (restored to an earlier point?); audit verify --witness names what it lost", latest.Seq, a.cursor)
	}
	return nil
}
