// Package workload appends realistic random review histories to a ledger,
// built through the domain commands: every event kind, human gates,
// four-eyes approvals, fail-closed classes, late and racing completions.
// Tests and the catch-up benchmark of package projections use it.
package workload

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

// Config describes a workload.
type Config struct {
	// Reviews to create; IDs are Prefix + index.
	Reviews int
	Prefix  string
	// Writers append concurrently, each its share of the reviews.
	Writers int
	// Seed makes each writer's choices reproducible.
	Seed uint64
	// Start is the simulated time of the first submission; reviews are
	// submitted Spacing apart (per writer) in simulated time.
	Start   time.Time
	Spacing time.Duration
	// Policy; DefaultPolicy() when it has no classes.
	Policy domain.Policy
	// Shadows, when set, are the shadow providers of every review's first
	// attempt: each review's shadow stream gets an observation from each
	// (a finding, a timeout or an error), before the review's first
	// finding or after its history, or none (a shadow skipped).
	Shadows []string
}

// Stats counts what a workload appended. Events includes the conflicting
// completions (late and duplicate findings), recorded in the reviews'
// conflict streams as the runner records them, the shadow observations, and the policy snapshots
// of the classes that were not stored yet (one event each, in a stream of
// its own).
type Stats struct {
	Reviews int64
	Events  int64
	// Policies is how many of Events are policy snapshots.
	Policies  int64
	Conflicts int64
	States    map[domain.State]int64
	// Shadows recounts, per shadow provider, the observations appended and
	// how their findings compare with their review's first finding.
	Shadows map[string]*ShadowStats
}

// ShadowStats is one shadow provider's recount: Compared counts its
// findings on reviews that got a finding of their own, Agreed those of the
// same state, Confusion them by [shadow state, review's first finding].
type ShadowStats struct {
	Observed, Findings, Compared, Agreed int64
	Confusion                            map[[2]domain.Decision]int64
}

func (s Stats) shadow(name string) *ShadowStats {
	c := s.Shadows[name]
	if c == nil {
		c = &ShadowStats{Confusion: map[[2]domain.Decision]int64{}}
		s.Shadows[name] = c
	}
	return c
}

// Run appends the workload to l and returns what it appended.
func Run(ctx context.Context, l *ledger.Ledger, cfg Config) (Stats, error) {
	if len(cfg.Policy.Classes) == 0 {
		cfg.Policy = DefaultPolicy()
	}
	cfg.Writers = max(cfg.Writers, 1)
	if cfg.Spacing == 0 {
		cfg.Spacing = 250 * time.Millisecond
	}
	if cfg.Start.IsZero() {
		cfg.Start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	policies, err := storePolicies(ctx, l, cfg.Policy)
	if err != nil {
		return Stats{}, err
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		first  error
		events atomic.Int64
		confl  atomic.Int64
		states = map[domain.State]int64{}
		stats  = Stats{Shadows: map[string]*ShadowStats{}}
	)
	for w := range cfg.Writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wr := &writer{cfg: cfg, l: l, rng: rand.New(rand.NewPCG(cfg.Seed, uint64(w))), classes: cfg.Policy.Names()}
			for i := w; i < cfg.Reviews; i += cfg.Writers {
				now := cfg.Start.Add(time.Duration(i) * cfg.Spacing)
				rv, n, err := wr.review(ctx, fmt.Sprintf("%s%d", cfg.Prefix, i), now)
				events.Add(n)
				if err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
				mu.Lock()
				states[rv.State()]++
				wr.recount(stats)
				mu.Unlock()
			}
			confl.Add(wr.conflicts)
		}()
	}
	wg.Wait()
	stats.Reviews, stats.Events, stats.Policies, stats.Conflicts, stats.States = int64(cfg.Reviews), policies+events.Load(), policies, confl.Load(), states
	return stats, first
}

// storePolicies stores the snapshot of every class of p before the reviews
// that name it, and returns how many were not stored before.
func storePolicies(ctx context.Context, l *ledger.Ledger, p domain.Policy) (int64, error) {
	var n int64
	for _, class := range p.Names() {
		s := p.Classes[class].Snapshot()
		_, err := l.Store().ReadStream(ctx, ledger.PolicyStreamName(s.Digest()), 0)
		if errors.Is(err, eventstore.ErrStreamNotFound) {
			n++
		} else if err != nil {
			return 0, fmt.Errorf("read policy snapshot of %s: %w", class, err)
		}
		if _, err := l.Policies().Put(ctx, s); err != nil {
			return 0, err
		}
	}
	return n, nil
}

type writer struct {
	cfg       Config
	l         *ledger.Ledger
	rng       *rand.Rand
	classes   []string
	conflicts int64
	// later are the shadow observations of the review being written that
	// come after its history, observed all of them, and first the state of
	// its first finding ("" when it got none).
	later    []domain.ShadowObserved
	observed []domain.ShadowObserved
	first    domain.Decision
}

// recount adds the shadow observations of the review just written to st.
func (w *writer) recount(st Stats) {
	for _, o := range w.observed {
		c := st.shadow(o.Provider)
		c.Observed++
		if o.Outcome != domain.ShadowFinding {
			continue
		}
		c.Findings++
		if w.first == "" {
			continue
		}
		c.Compared++
		if o.State == w.first {
			c.Agreed++
		}
		c.Confusion[[2]domain.Decision{o.State, w.first}]++
	}
}

var (
	runner    = ledger.Actor{Name: "runner"}
	sweeper   = ledger.Actor{Name: "sweeper"}
	shadower  = ledger.Actor{Name: "shadow"}
	moderator = []string{"ada", "bo", "cy"}
)

// review writes one review's history starting at now, then the shadow
// observations that come after it, and returns the review and how many
// events were appended.
func (w *writer) review(ctx context.Context, id string, now time.Time) (*ledger.Snapshot, int64, error) {
	w.later, w.observed, w.first = w.later[:0], w.observed[:0], ""
	rv, n, err := w.history(ctx, id, now)
	if err != nil {
		return rv, n, err
	}
	for _, o := range w.later {
		if err := w.l.RecordShadow(ctx, o, shadower); err != nil {
			return rv, n, err
		}
		n++
	}
	return rv, n, nil
}

// shadows returns the observations of the shadows of a review's first
// attempt (start), recording at once those that come before its first
// finding and keeping the others for after its history; a shadow of
// twenty is skipped.
func (w *writer) shadows(ctx context.Context, rv *ledger.Snapshot, start domain.AttemptStarted) (int64, error) {
	var n int64
	for _, name := range start.Shadows {
		if w.rng.Float64() < 0.05 {
			continue
		}
		res := domain.ShadowResult{Provider: name, Outcome: domain.ShadowFinding, State: domain.DecisionAccepted,
			StartedAt: start.StartedAt, Took: time.Duration(50+w.rng.IntN(4000)) * time.Millisecond}
		switch r := w.rng.Float64(); {
		case r < 0.3:
			res.State = domain.DecisionRejected
		case r < 0.4:
			res.Outcome, res.State, res.Classification = domain.ShadowTimeout, "", domain.ClassDeadlineExceeded
		case r < 0.45:
			res.Outcome, res.State, res.Classification = domain.ShadowError, "", domain.ClassProviderUnavailable
		}
		o, err := rv.ObserveShadow(res)
		if err != nil {
			return n, err
		}
		w.observed = append(w.observed, o)
		if w.rng.Float64() < 0.5 {
			w.later = append(w.later, o)
			continue
		}
		if err := w.l.RecordShadow(ctx, o, shadower); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

func (w *writer) history(ctx context.Context, id string, now time.Time) (*ledger.Snapshot, int64, error) {
	class := w.classes[w.rng.IntN(len(w.classes))]
	pol := w.cfg.Policy.Classes[class]
	sub, err := domain.Submit(domain.SubmitCommand{
		ReviewID: id, ContentClass: class, ContentType: "text/plain",
		PayloadDigest: fmt.Sprintf("sha256:%064x", w.rng.Uint64()), PayloadBytes: 100 + w.rng.IntN(5000),
		Policy: pol, SubmittedBy: "loadgen", Now: now,
	})
	if err != nil {
		return nil, 0, err
	}
	rv, err := w.l.Create(ctx, sub, ledger.Actor{Name: "loadgen"})
	if err != nil {
		return nil, 0, err
	}
	var n int64 = 1
	add := func(actor ledger.Actor, events ...domain.Event) error {
		next, err := w.l.Append(ctx, rv, actor, events...)
		if err != nil {
			return err
		}
		rv, n = next, n+int64(len(events))
		return nil
	}
	escalate := func(reason domain.EscalationReason) error {
		e, err := rv.Escalate(reason, "", now)
		if err != nil {
			return err
		}
		return add(runner, e)
	}

	for {
		// The automated path.
		for rv.State() == domain.StatePending {
			if w.rng.Float64() < 0.02 {
				return rv, n, nil // worker lost before starting: stays pending
			}
			start, err := rv.StartAttempt(now)
			switch {
			case errors.Is(err, domain.ErrAttemptsExhausted):
				if err := escalate(domain.ReasonAttemptsExhausted); err != nil {
					return rv, n, err
				}
				continue
			case errors.Is(err, domain.ErrBudgetExhausted):
				if w.rng.Float64() < 0.5 {
					now = now.Add(time.Second)
					e, err := rv.Escalate(domain.ReasonDeadlinePassed, "swept", now)
					if err != nil {
						return rv, n, err
					}
					if err := add(sweeper, e); err != nil {
						return rv, n, err
					}
				} else if err := escalate(domain.ReasonBudgetExhausted); err != nil {
					return rv, n, err
				}
				continue
			case err != nil:
				return rv, n, err
			}
			if start.Attempt == 1 {
				start.Shadows = slices.Clone(w.cfg.Shadows)
			}
			if err := add(runner, start); err != nil {
				return rv, n, err
			}
			shadowed, err := w.shadows(ctx, rv, start)
			n += shadowed
			if err != nil {
				return rv, n, err
			}
			if w.rng.Float64() < 0.01 {
				return rv, n, nil // attempt left in flight
			}
			timeout := time.Duration(start.AttemptTimeoutMS) * time.Millisecond
			// Service times: log-normal around 1.5 s with a long tail.
			service := time.Duration(1500*math.Exp(w.rng.NormFloat64()*0.9)) * time.Millisecond
			switch r := w.rng.Float64(); {
			case r < 0.65 && service <= timeout:
				now = now.Add(service)
				state := domain.DecisionAccepted
				if w.rng.Float64() < 0.3 {
					state = domain.DecisionRejected
				}
				evs, err := rv.RecordFinding(domain.Finding{ReviewID: id, Attempt: start.Attempt, State: state, Reasons: []string{"rule:" + string(state)}}, domain.SourceResponse, now)
				if err != nil {
					return rv, n, err
				}
				if w.first == "" {
					w.first = state
				}
				if err := add(ledger.Actor{Name: "provider"}, evs...); err != nil {
					return rv, n, err
				}
				if w.rng.Float64() < 0.1 {
					// A duplicate callback for the same attempt: refused, counted.
					if err := w.conflict(ctx, rv, start.Attempt, domain.ConflictReviewMovedOn, now.Add(50*time.Millisecond)); err != nil {
						return rv, n, err
					}
					n++
				}
			case r < 0.7:
				now = now.Add(200 * time.Millisecond)
				e, err := rv.TimeOutAttempt(domain.AttemptFailure{Attempt: start.Attempt, Classification: domain.ClassProviderRefused, Detail: "status 400"}, now)
				if err != nil {
					return rv, n, err
				}
				if err := add(runner, e); err != nil {
					return rv, n, err
				}
				if err := escalate(domain.ReasonProviderRefused); err != nil {
					return rv, n, err
				}
			default:
				kind, elapsed := domain.ClassDeadlineExceeded, timeout
				var retryAfter time.Duration
				switch r := w.rng.Float64(); {
				case r < 0.3:
					kind, elapsed = domain.ClassTransportError, min(timeout, time.Duration(w.rng.Int64N(int64(timeout)))+time.Millisecond)
				case r < 0.4:
					kind, elapsed, retryAfter = domain.ClassRateLimited, 30*time.Millisecond, time.Duration(w.rng.IntN(3))*time.Second
				case r < 0.45:
					kind, elapsed = domain.ClassInvalidFinding, service
				}
				now = now.Add(elapsed)
				e, err := rv.TimeOutAttempt(domain.AttemptFailure{Attempt: start.Attempt, Classification: kind, RetryAfter: retryAfter}, now)
				if err != nil {
					return rv, n, err
				}
				if err := add(runner, e); err != nil {
					return rv, n, err
				}
				if kind == domain.ClassDeadlineExceeded && w.rng.Float64() < 0.2 {
					// The provider answers after all: the late finding is refused.
					if _, err := rv.RecordFinding(domain.Finding{ReviewID: id, Attempt: start.Attempt, State: domain.DecisionAccepted}, domain.SourceCallback, now.Add(time.Second)); !errors.Is(err, domain.ErrAttemptNotInFlight) {
						return rv, n, fmt.Errorf("late finding: got %v, want ErrAttemptNotInFlight", err)
					}
					if err := w.conflict(ctx, rv, start.Attempt, domain.ConflictAttemptNotInFlight, now.Add(time.Second)); err != nil {
						return rv, n, err
					}
					n++
				}
				wait, ok := domain.RetryWait(now, rv.Deadline(), pol.Backoff.Delay(start.Attempt, w.rng), retryAfter)
				if !ok {
					if err := escalate(domain.ReasonRetryBudgetExhausted); err != nil {
						return rv, n, err
					}
					continue
				}
				now = now.Add(wait)
			}
		}

		// The manual path.
		requeued := false
		for rv.State() == domain.StateManualReview && !requeued {
			if err := w.coordinate(&rv, &now, add); err != nil {
				return rv, n, err
			}
			if w.rng.Float64() < 0.3 {
				return rv, n, nil // still waiting for a moderator
			}
			now = now.Add(time.Duration(1+w.rng.IntN(120)) * time.Second)
			if rv.Round() < 3 && w.rng.Float64() < 0.15 {
				// Back to the provider: a new round with a fresh budget.
				e, err := rv.Requeue(domain.RequeueCommand{By: "ada", Note: "provider back", ExpectedVersion: rv.Version()}, now)
				if errors.As(err, new(*domain.ClaimedError)) {
					continue
				}
				if err != nil {
					return rv, n, err
				}
				if err := add(ledger.Actor{Name: "ada"}, e); err != nil {
					return rv, n, err
				}
				requeued = true
				continue
			}
			if pol.ClaimsRequired() {
				if err := w.claimToDecide(&rv, now, add); err != nil {
					return rv, n, err
				}
			}
			state := domain.DecisionAccepted
			if w.rng.Float64() < 0.4 {
				state = domain.DecisionRejected
			}
			// Two moderators may act on the same version at once: one wins, the
			// other's append fails its expected-revision check.
			racing := w.rng.Float64() < 0.1
			base := rv
			var picked []string
			for _, m := range moderator {
				if _, err := base.DecideManually(domain.ManualDecision{Moderator: m, State: state, ExpectedVersion: base.Version()}, now); err == nil {
					// With claims: required only the holder may: it is picked alone.
					picked = append(picked, m)
				}
			}
			if len(picked) == 0 {
				return rv, n, fmt.Errorf("review %s: no moderator may decide", id)
			}
			evs, _ := base.DecideManually(domain.ManualDecision{Moderator: picked[0], State: state, Note: "checked by " + picked[0], ExpectedVersion: base.Version()}, now)
			if err := add(ledger.Actor{Name: picked[0]}, evs...); err != nil {
				return rv, n, err
			}
			if racing && len(picked) > 1 {
				evs, _ := base.DecideManually(domain.ManualDecision{Moderator: picked[1], State: state, ExpectedVersion: base.Version()}, now)
				if _, err := w.l.Append(ctx, base, ledger.Actor{Name: picked[1]}, evs...); !errors.Is(err, eventstore.ErrWrongExpectedVersion) {
					return rv, n, fmt.Errorf("racing decision: got %v, want ErrWrongExpectedVersion", err)
				}
			}
		}
		if !requeued {
			return rv, n, nil
		}
	}
}

// coordinate lets moderators claim, release and hold a review waiting for
// them, as a team working the queue would.
func (w *writer) coordinate(rvp **ledger.Snapshot, nowp *time.Time, add func(ledger.Actor, ...domain.Event) error) error {
	rv, now := *rvp, *nowp
	m := moderator[w.rng.IntN(len(moderator))]
	try := func(e domain.Event, err error) error {
		if err != nil {
			return nil // not allowed now (someone else's claim, a hold held): skip
		}
		if err := add(ledger.Actor{Name: m}, e); err != nil {
			return err
		}
		rv = *rvp
		return nil
	}
	var err error
	if w.rng.Float64() < 0.25 {
		err = try(one(rv.Claim(m, time.Minute, now)))
		if err == nil && w.rng.Float64() < 0.3 {
			now = now.Add(time.Duration(w.rng.IntN(90)) * time.Second)
			if e, ok := rv.ExpireClaim(now); ok {
				err = try(e, nil)
			} else {
				err = try(one(rv.ReleaseClaim(m, false, now)))
			}
		}
	}
	if err == nil && w.rng.Float64() < 0.1 {
		err = try(one(rv.PutOnHold(domain.HoldCommand{By: m, Note: "waiting for legal"}, now)))
		if err == nil && w.rng.Float64() < 0.5 {
			err = try(one(rv.TakeOffHold(m, now.Add(time.Second))))
		}
	}
	*nowp = now
	return err
}

func one[E domain.Event](e E, err error) (domain.Event, error) { return e, err }

// claimToDecide makes sure a moderator who may still vote holds the live
// claim of a review whose class requires one.
func (w *writer) claimToDecide(rvp **ledger.Snapshot, now time.Time, add func(ledger.Actor, ...domain.Event) error) error {
	rv := *rvp
	if c := rv.CurrentClaim(); c != nil {
		e, expired := rv.ExpireClaim(now)
		switch {
		case !expired && !approvedBy(rv, c.Moderator):
			return nil // the holder may decide
		case !expired:
			// The holder already voted: the claim is given up.
			var err error
			if e, err = rv.ReleaseClaim(c.Moderator, false, now); err != nil {
				return err
			}
		}
		if err := add(ledger.Actor{Name: e.By}, e); err != nil {
			return err
		}
		rv = *rvp
	}
	for _, m := range moderator {
		if !approvedBy(rv, m) {
			e, err := rv.Claim(m, time.Minute, now)
			if err != nil {
				return err
			}
			return add(ledger.Actor{Name: m}, e)
		}
	}
	return nil
}

func approvedBy(rv *ledger.Snapshot, m string) bool {
	for _, names := range rv.Approvals() {
		if slices.Contains(names, m) {
			return true
		}
	}
	return false
}

// conflict records a refused callback for attempt of rv.
func (w *writer) conflict(ctx context.Context, rv *ledger.Snapshot, attempt int, reason domain.ConflictReason, at time.Time) error {
	e, err := rv.RecordConflict(domain.Conflict{Attempt: attempt, Source: domain.SourceCallback, Reason: reason, State: domain.DecisionAccepted}, at)
	if err != nil {
		return err
	}
	if err := w.l.RecordConflict(ctx, e, ledger.Actor{Name: "provider"}); err != nil {
		return err
	}
	w.conflicts++
	return nil
}

// DefaultPolicy is domain.DefaultPolicy with four-eyes (approvals: 2) on
// publishing_rule and a manual SLA on transcript_import, as a policy file
// would set them, and a class requiring claims (claimed_rule), so the
// workload exercises every event kind.
func DefaultPolicy() domain.Policy {
	p := domain.DefaultPolicy()
	rule := p.Classes["publishing_rule"]
	rule.Approvals = 2
	p.Classes["publishing_rule"] = rule
	imp := p.Classes["transcript_import"]
	imp.ManualSLA = 2 * time.Minute
	p.Classes["transcript_import"] = imp
	claimed := p.Classes["caption_suggestion"]
	claimed.Claims, claimed.ManualSLA, claimed.Approvals = domain.ClaimsRequired, time.Minute, 2
	p.Classes["claimed_rule"] = claimed
	return p
}
