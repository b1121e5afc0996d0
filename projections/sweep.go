package projections

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/clock"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

// SweepConfig configures a Sweeper.
type SweepConfig struct {
	DB *DB
	// Reviews is the ledger the sweeper writes through (*ledger.Ledger),
	// by ledger.Commands.
	Reviews ledger.StepWriter
	// Interval between sweeps (5 s when 0).
	Interval time.Duration
	// Registerer receives the sweep's metrics (none when nil).
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	Now        func() time.Time
}

// Sweeper takes care of the manual queue's clocks, in the projector: it
// records as ClaimReleased (reason expired, by "system") each claim whose
// lease ran out, and counts each queue item whose due time passed, once per
// review and round however many processes sweep
// (reviewledger_manual_sla_breaches_total).
type Sweeper struct {
	cfg      SweepConfig
	breaches *prometheus.CounterVec
	expired  prometheus.Counter
}

// sweepPage bounds the claims one sweep releases.
const sweepPage = 500

// NewSweeper returns a sweeper; it registers its metrics.
func NewSweeper(cfg SweepConfig) (*Sweeper, error) {
	if cfg.DB == nil || cfg.Reviews == nil {
		return nil, errors.New("projections: SweepConfig.DB and Reviews are required")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Sweeper{cfg: cfg,
		breaches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reviewledger_manual_sla_breaches_total",
			Help: "Manual-queue items whose due time (escalation + the class's manual_sla) passed while they waited, once per review and round across every process, by content class.",
		}, []string{"content_class"}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reviewledger_manual_claims_expired_total",
			Help: "Claims whose lease ran out, recorded as released by this process.",
		}),
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{s.breaches, s.expired} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("register sweep metrics: %w", err)
			}
		}
	}
	return s, nil
}

// Run sweeps every interval until ctx is done; failed sweeps are logged
// and tried again at the next one.
func (s *Sweeper) Run(ctx context.Context) error {
	for {
		if err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("manual-queue sweep failed; trying again", "error", err.Error())
		}
		if clock.Sleep(ctx, s.cfg.Interval) != nil {
			return nil
		}
	}
}

// Sweep releases expired claims and counts SLA breaches once.
func (s *Sweeper) Sweep(ctx context.Context) error {
	now := s.cfg.Now()
	breaches, err := s.cfg.DB.CountBreaches(ctx, now)
	if err != nil {
		return err
	}
	for _, b := range breaches {
		s.breaches.WithLabelValues(b.ContentClass).Inc()
	}
	ids, err := s.cfg.DB.ExpiredClaims(ctx, now, sweepPage)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if err := s.expire(ctx, id, now); err != nil {
			return err
		}
	}
	return nil
}

// expire records the end of the review's expired claim at the sweep's
// time now, through ledger.Commands, unless it was recorded meanwhile (by
// another sweeper) or the claim was renewed.
func (s *Sweeper) expire(ctx context.Context, id string, now time.Time) error {
	commands := ledger.Commands{Ledger: s.cfg.Reviews, Now: func() time.Time { return now }}
	_, step, err := commands.Run(ctx, id, nil, ledger.Actor{Name: domain.SystemActor}, expireClaim)
	if errors.Is(err, eventstore.ErrWrongExpectedVersion) {
		return nil // the review moved: the next sweep looks again
	}
	if err != nil {
		return err
	}
	if len(step.Events) > 0 {
		s.expired.Inc()
	}
	return nil
}

// expireClaim is the command that records the end of an expired claim:
// nothing when the review holds none that has expired at now.
func expireClaim(rv *ledger.Snapshot, now time.Time) (ledger.Step, error) {
	e, ok := rv.ExpireClaim(now)
	if !ok {
		return ledger.Step{}, nil
	}
	return ledger.Step{Events: []domain.Event{e}}, nil
}
