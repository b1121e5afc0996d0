package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/api/engine"
	"github.com/reviewledger/reviewledger/api/engine/work"
	"github.com/reviewledger/reviewledger/api/engine/work/pgwork"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/pgstore"
)

// scaleClasses are the content classes of the grown ledger and of the
// server that serves it (scalePolicy renders them for serve): two, so that
// the manual queue's class filter selects a part of it.
var scaleClasses = map[string]domain.ClassPolicy{
	benchClass: {Budget: 60 * time.Second, AttemptTimeout: 10 * time.Second, MaxAttempts: 3,
		Backoff:      domain.Backoff{Initial: 100 * time.Millisecond, Max: 2 * time.Second, Jitter: 75 * time.Millisecond},
		OnExhaustion: domain.ExhaustToManualReview, Priority: 1},
	"bench_media": {Budget: 60 * time.Second, AttemptTimeout: 10 * time.Second, MaxAttempts: 3,
		Backoff:      domain.Backoff{Initial: 100 * time.Millisecond, Max: 2 * time.Second, Jitter: 75 * time.Millisecond},
		OnExhaustion: domain.ExhaustToManualReview, Priority: 2},
}

// scalePolicy is scaleClasses as a policy file.
func scalePolicy() string {
	names := make([]string, 0, len(scaleClasses))
	for n := range scaleClasses {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("classes:\n")
	for _, n := range names {
		c := scaleClasses[n]
		fmt.Fprintf(&b, "  %s:\n    budget: %s\n    attempt_timeout: %s\n    max_attempts: %d\n    backoff: {initial: %s, max: %s, jitter: %s}\n    on_exhaustion: %s\n    priority: %d\n",
			n, c.Budget, c.AttemptTimeout, c.MaxAttempts, c.Backoff.Initial, c.Backoff.Max, c.Backoff.Jitter, c.OnExhaustion, c.Priority)
	}
	return b.String()
}

// loadConfig is what the loader writes.
type loadConfig struct {
	Reviews int           // reviews to write
	Waiting int           // of them left waiting in the manual queue
	Span    time.Duration // submissions spread evenly over this span, ending at End
	End     time.Time
	Writers int // reviews written at once (their appends are group-committed)
	Seed    uint64
	IDs     string // the form of the reviews' IDs (scaleReviewID)
}

// submittedAt is when review i was submitted.
func (c loadConfig) submittedAt(i int) time.Time {
	return c.End.Add(-c.Span).Add(time.Duration(float64(c.Span) * float64(i) / float64(max(c.Reviews, 1))))
}

// reviewID is review i's ID.
func (c loadConfig) reviewID(i int) string { return scaleReviewID(c.IDs, i, c.submittedAt(i)) }

// loadStats is what the loader wrote.
type loadStats struct {
	Reviews int64
	Events  int64
	States  map[domain.State]int64
	Elapsed time.Duration
}

// Actors of the loaded reviews, as the service names them.
var (
	loadSubmitter = ledger.Actor{Name: "bench"}
	loadEngine    = ledger.Actor{Name: "engine"}
	loadSweeper   = ledger.Actor{Name: "sweeper"}
	loadOwner     = "scale-loader"
)

// growLedger writes cfg.Reviews reviews into the migrated database behind
// pool through the product's own write path: each review's events made by
// the domain's commands, chained and encoded by the ledger, written by its
// group commit with pgwork's committer, so that every append carries the
// work-record and content change the engine gives it (a review's content
// and work record created with its Submitted event, the record parked on a
// retry and deleted as the review leaves the automated path). Nothing is
// written by hand: a change of the storage format is followed.
func growLedger(ctx context.Context, pool *pgxpool.Pool, cfg loadConfig) (loadStats, error) {
	pg := pgstore.New(pool, pgstore.Config{})
	defer pg.Close()
	store := pgwork.New(pool, pg)
	l := ledger.New(pg, ledger.Options{Committer: store, GroupCommit: ledger.GroupCommit{MaxBatch: 512, Flushes: 2}})
	var (
		next   atomic.Int64
		events atomic.Int64
		mu     sync.Mutex
		states = map[domain.State]int64{}
		first  error
		wg     sync.WaitGroup
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	for w := range max(cfg.Writers, 1) {
		wg.Go(func() {
			lw := &loadWriter{cfg: cfg, l: l, rng: rand.New(rand.NewPCG(cfg.Seed, uint64(w)))}
			for {
				i := int(next.Add(1)) - 1
				if i >= cfg.Reviews || ctx.Err() != nil {
					return
				}
				state, n, err := lw.review(ctx, i)
				events.Add(n)
				mu.Lock()
				if err != nil && first == nil {
					first = fmt.Errorf("review %d: %w", i, err)
					cancel()
				}
				states[state]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	st := loadStats{Reviews: int64(cfg.Reviews), Events: events.Load(), States: states, Elapsed: time.Since(start)}
	return st, first
}

type loadWriter struct {
	cfg loadConfig
	l   *ledger.Ledger
	rng *rand.Rand
}

// The outcomes of the loaded reviews.
const (
	outcomeAccepted = iota // one attempt, accepted
	outcomeRejected        // one attempt, rejected
	outcomeRetried         // a transport error, a parked wait, then accepted
	outcomeRefused         // the provider refused: the manual queue
	outcomeSwept           // the attempt never answered: the sweeper escalates past the deadline
)

// outcome picks review i's outcome: the manual-queue ones spread evenly
// over the reviews, cfg.Waiting of them, the rest mostly accepted.
func (w *loadWriter) outcome(i int) int {
	if w.cfg.Waiting > 0 {
		every := max(w.cfg.Reviews/w.cfg.Waiting, 1)
		if i%every == 0 && i/every < w.cfg.Waiting {
			if (i/every)%4 == 3 {
				return outcomeSwept
			}
			return outcomeRefused
		}
	}
	switch r := w.rng.Float64(); {
	case r < 0.2:
		return outcomeRejected
	case r < 0.27:
		return outcomeRetried
	}
	return outcomeAccepted
}

// review writes review i and returns its final state and how many events
// it has.
func (w *loadWriter) review(ctx context.Context, i int) (domain.State, int64, error) {
	id := w.cfg.reviewID(i)
	class := benchClass
	if i%3 == 2 {
		class = "bench_media"
	}
	pol := scaleClasses[class]
	at := w.cfg.submittedAt(i)
	// The same content whatever the form of the IDs.
	content := fmt.Appendf(nil, "bench caption scale-%d: the quick brown fox jumps over the lazy dog", i)
	pl := work.Payload{Digest: engine.Digest(content), ContentType: "text/plain", Content: content}
	sub, err := domain.Submit(domain.SubmitCommand{ReviewID: id, ContentClass: class, ContentType: pl.ContentType,
		PayloadDigest: pl.Digest, PayloadBytes: len(content), Policy: pol, SubmittedBy: loadSubmitter.Name, Now: at})
	if err != nil {
		return "", 0, err
	}
	r := &domain.Review{}
	if err := r.Apply(0, sub); err != nil {
		return "", 0, err
	}
	first, err := r.StartAttempt(at)
	if err != nil {
		return "", 0, err
	}
	lease := 30 * time.Second
	_, rv, err := w.l.CreateThen(ctx, sub, loadSubmitter, work.Change{Op: work.Create, ReviewID: id, Deadline: sub.Deadline,
		Payload: pl, At: at, Owner: loadOwner, LeaseUntil: at.Add(lease)}, loadEngine, first)
	if err != nil {
		return "", 0, err
	}
	n := int64(2)
	now := at.Add(time.Duration(20+w.rng.IntN(400)) * time.Millisecond)
	appendStep := func(actor ledger.Actor, change work.Change, evs ...domain.Event) error {
		next, err := w.l.Write(ctx, rv, actor, ledger.Step{Events: evs, Work: &change})
		if err != nil {
			return err
		}
		rv, n = next, n+int64(len(evs))
		return nil
	}
	release := work.Change{Op: work.Release, ReviewID: id, Owner: loadOwner}
	attempt := first.Attempt
	switch w.outcome(i) {
	case outcomeRetried:
		timedOut, err := rv.TimeOutAttempt(domain.AttemptFailure{Attempt: attempt, Classification: domain.ClassTransportError, Detail: "connection reset"}, now)
		if err != nil {
			return "", n, err
		}
		wait := pol.Backoff.Delay(attempt, w.rng)
		if err := appendStep(loadEngine, work.Change{Op: work.Park, ReviewID: id, Owner: loadOwner, Until: now.Add(wait)}, timedOut); err != nil {
			return "", n, err
		}
		now = now.Add(wait)
		again, err := rv.StartAttempt(now)
		if err != nil {
			return "", n, err
		}
		// Taken again as the engine takes a due record, then started.
		if err := appendStep(loadEngine, work.Change{Op: work.Keep, ReviewID: id, Owner: loadOwner}, again); err != nil {
			return "", n, err
		}
		attempt, now = again.Attempt, now.Add(time.Duration(20+w.rng.IntN(400))*time.Millisecond)
		fallthrough
	case outcomeAccepted, outcomeRejected:
		state := domain.DecisionAccepted
		if w.outcome(i) == outcomeRejected {
			state = domain.DecisionRejected
		}
		evs, err := rv.RecordFinding(domain.Finding{ReviewID: id, Attempt: attempt, State: state, Reasons: []string{"rule:" + string(state)}}, domain.SourceResponse, now)
		if err != nil {
			return "", n, err
		}
		if err := appendStep(loadEngine, release, evs...); err != nil {
			return "", n, err
		}
	case outcomeRefused:
		timedOut, err := rv.TimeOutAttempt(domain.AttemptFailure{Attempt: attempt, Classification: domain.ClassProviderRefused, Detail: "status 400"}, now)
		if err != nil {
			return "", n, err
		}
		r := rv.Review.Clone()
		if err := r.Apply(rv.Version()+1, timedOut); err != nil {
			return "", n, err
		}
		esc, err := r.Escalate(domain.ReasonProviderRefused, "", now)
		if err != nil {
			return "", n, err
		}
		if err := appendStep(loadEngine, release, timedOut, esc); err != nil {
			return "", n, err
		}
	case outcomeSwept:
		past := rv.Deadline().Add(time.Second)
		timedOut, err := rv.TimeOutAttempt(domain.AttemptFailure{Attempt: attempt, Classification: domain.ClassWorkerLost}, past)
		if err != nil {
			return "", n, err
		}
		r := rv.Review.Clone()
		if err := r.Apply(rv.Version()+1, timedOut); err != nil {
			return "", n, err
		}
		esc, err := r.Escalate(domain.ReasonDeadlinePassed, "swept", past)
		if err != nil {
			return "", n, err
		}
		if err := appendStep(loadSweeper, release, timedOut, esc); err != nil {
			return "", n, err
		}
	}
	return rv.State(), n, nil
}
