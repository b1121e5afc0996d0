package domain_test

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/domain"
)

var (
	propertySeed = flag.Uint64("domain.seed", 1, "first seed of the random command sequences")
	propertyRuns = flag.Int("domain.sequences", 4000, "number of random command sequences")
)

// sentinels are the errors a command may refuse with.
var sentinels = []error{
	domain.ErrReviewNotFound, domain.ErrNotPending, domain.ErrNotInManualReview, domain.ErrAttemptInFlight,
	domain.ErrAttemptNotInFlight, domain.ErrAttemptsExhausted, domain.ErrBudgetExhausted, domain.ErrInvalidFinding,
	domain.ErrVersionMismatch, domain.ErrAlreadyApproved, domain.ErrInvalidDecision,
	domain.ErrClaimedByOther, domain.ErrClaimRequired, domain.ErrNotClaimed, domain.ErrAlreadyHeld, domain.ErrNotHeld,
}

// TestRandomCommandSequences applies random commands at random times to
// reviews of random classes and checks the invariants of the state machine
// after every step: at most one terminal decision, no way out of a
// terminal state, contiguous revisions, attempts within max_attempts, and a
// history that rehydrates (also through its stored JSON) to the review
// built step by step. Every sequence prints its seed when it fails; rerun
// one with -domain.seed=N -domain.sequences=1.
func TestRandomCommandSequences(t *testing.T) {
	t.Parallel()
	// Two shards, so the sequences run on both cores of a small CI runner.
	const shards = 2
	for shard := range shards {
		t.Run(fmt.Sprintf("shard %d", shard), func(t *testing.T) {
			t.Parallel()
			var seen outcomes
			runs := 0
			for i := shard; i < *propertyRuns; i += shards {
				seed := *propertySeed + uint64(i)
				if err := runSequence(seed, &seen); err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
				runs++
			}
			// The generator must reach every corner, or the invariants
			// hold vacuously.
			for name, n := range seen.counts() {
				t.Logf("%5d of %d sequences: %s", n, runs, name)
				if runs >= 500 && n < runs/200 {
					t.Errorf("only %d of %d sequences reached %q", n, runs, name)
				}
			}
		})
	}
}

type outcomes struct {
	acceptedByProvider, rejectedByProvider, rejectedByPolicy, decidedByModerator int
	fourEyesDecisions, disagreements, gateHeld, stillPending, stillQueued, late  int
	nextStart, nextWait, nextClose, nextEscalate, nextNone                       int
	laterRound, claimed, held                                                    int
}

func (o *outcomes) counts() map[string]int {
	return map[string]int{
		"accepted by the provider": o.acceptedByProvider, "rejected by the provider": o.rejectedByProvider,
		"rejected by policy": o.rejectedByPolicy, "decided by a moderator": o.decidedByModerator,
		"four-eyes decision": o.fourEyesDecisions, "disagreeing votes": o.disagreements,
		"accept held by the human gate": o.gateHeld, "still pending": o.stillPending,
		"still in manual_review": o.stillQueued, "late finding refused": o.late,
		"next: start": o.nextStart, "next: wait": o.nextWait, "next: close": o.nextClose,
		"next: escalate": o.nextEscalate, "next: none": o.nextNone,
		"requeued into a later round": o.laterRound, "claimed": o.claimed, "held": o.held,
	}
}

// sequence is one random run; log records its steps for the failure report.
type sequence struct {
	rng    *rand.Rand
	policy domain.ClassPolicy
	review *domain.Review
	events []domain.Event
	now    time.Time
	log    []step
	steps  map[domain.StepKind]int
}

// step is one command of a sequence, formatted only when a sequence fails.
type step struct {
	name   string
	at     time.Duration
	events []domain.Event
	err    error
}

func (s step) String() string {
	return fmt.Sprintf("%s at +%s: %v %v", s.name, s.at, types(s.events), s.err)
}

func runSequence(seed uint64, seen *outcomes) (err error) {
	q := &sequence{rng: rand.New(rand.NewPCG(seed, 0x5eed)), review: &domain.Review{}, now: t0, steps: map[domain.StepKind]int{}}
	defer func() {
		if err != nil {
			var steps strings.Builder
			for _, s := range q.log {
				fmt.Fprintf(&steps, "\n  %s", s)
			}
			err = fmt.Errorf("%w\npolicy %+v\nsteps:%s", err, q.policy, steps.String())
		}
	}()
	q.policy = randomPolicy(q.rng)
	if q.rng.IntN(4) == 0 {
		q.policy.Claims = domain.ClaimsRequired
	}
	submitted, err := domain.Submit(domain.SubmitCommand{ReviewID: testID, ContentClass: testClass, Policy: q.policy, Now: t0})
	if err != nil {
		return fmt.Errorf("Submit: %w", err)
	}
	if err := q.apply([]domain.Event{submitted}); err != nil {
		return err
	}
	decisions := 0
	deep := seed%8 == 0
	for range 1 + q.rng.IntN(40) {
		q.tick()
		// Commands must not change the review. The deep comparison is the
		// costly part of a step under the race detector, so one sequence
		// in eight makes it at every step (TestTransitions does in every case).
		var clone *domain.Review
		if deep {
			clone = q.review.Clone()
		}
		before := prior{q.review.State(), q.review.Version()}
		name, events, cmdErr := q.command()
		q.log = append(q.log, step{name, q.now.Sub(t0), events, cmdErr})
		if deep && !reflect.DeepEqual(clone, q.review) {
			return errors.New("a command changed the review")
		}
		if errors.Is(cmdErr, errInvariant) {
			return cmdErr
		}
		if cmdErr != nil {
			if len(events) != 0 || !isSentinel(cmdErr) {
				return fmt.Errorf("refusal %v with events %v; want a sentinel and none", cmdErr, types(events))
			}
			if name == "late finding" && errors.Is(cmdErr, domain.ErrAttemptNotInFlight) {
				seen.late++
			}
			continue
		}
		if before.state.Terminal() && len(events) > 0 {
			return fmt.Errorf("%s succeeded on a %s review", name, before.state)
		}
		for _, e := range events {
			wasTerminal := q.review.State().Terminal()
			if err := q.apply([]domain.Event{e}); err != nil {
				return err
			}
			if !wasTerminal && q.review.State().Terminal() {
				decisions++
			}
			if esc, ok := e.(domain.Escalated); ok && esc.Reason == domain.ReasonHumanGate && name == "finding" {
				seen.gateHeld++
			}
		}
		if err := q.check(before, decisions, name); err != nil {
			return err
		}
	}
	if err := q.checkHistory(); err != nil {
		return err
	}
	q.count(seen)
	return nil
}

// tick moves the clock: mostly forward by a little, sometimes by a lot,
// sometimes not at all, and now and then backwards (clocks disagree).
func (q *sequence) tick() {
	budget := int64(q.policy.Budget)
	switch q.rng.IntN(10) {
	case 0, 1:
	case 2:
		q.now = q.now.Add(-time.Duration(q.rng.Int64N(int64(time.Second))))
	case 3, 4:
		q.now = q.now.Add(time.Duration(q.rng.Int64N(budget/2 + 1)))
	default:
		q.now = q.now.Add(time.Duration(q.rng.Int64N(int64(q.policy.AttemptTimeout) + 1)))
	}
}

func (q *sequence) command() (string, []domain.Event, error) {
	r, rng, now := q.review, q.rng, q.now
	inFlight, _, _, _ := r.InFlight()
	attempt := inFlight
	if attempt == 0 || rng.IntN(5) == 0 {
		attempt = rng.IntN(r.Attempts() + 2)
	}
	switch rng.IntN(17) {
	case 12, 13:
		return q.next()
	case 14, 15, 16:
		return q.moderate()
	case 0, 1, 2:
		events, err := one(r.StartAttempt(now))
		return "start", events, err
	case 3, 4:
		classes := []domain.Classification{domain.ClassDeadlineExceeded, domain.ClassTransportError, domain.ClassRateLimited,
			domain.ClassInvalidFinding, domain.ClassWorkerLost, domain.ClassProviderRefused, domain.ClassStoreUnavailable}
		events, err := one(r.TimeOutAttempt(domain.AttemptFailure{Attempt: attempt, Classification: classes[rng.IntN(len(classes))], RetryAfter: time.Duration(rng.IntN(3)) * time.Second}, now))
		return "timeout", events, err
	case 5, 6, 7:
		f := domain.Finding{ReviewID: testID, Attempt: attempt, State: pick(rng, domain.DecisionAccepted, domain.DecisionRejected, domain.DecisionAccepted, domain.DecisionRejected, "", "manual_review")}
		if rng.IntN(10) == 0 {
			f.ReviewID = "rev-2"
		}
		if rng.IntN(2) == 0 {
			f.Reasons = []string{"r"}
		}
		name := "finding"
		if _, _, started, timeout := r.InFlight(); inFlight != 0 && f.Attempt == inFlight && now.After(started.Add(timeout)) {
			name = "late finding"
		}
		events, err := r.RecordFinding(f, pick(rng, domain.SourceResponse, domain.SourceCallback), now)
		return name, events, err
	case 8:
		reason := pick(rng, domain.ReasonAttemptsExhausted, domain.ReasonBudgetExhausted, domain.ReasonDeadlinePassed,
			domain.ReasonProviderRefused, domain.ReasonRetryBudgetExhausted, domain.ReasonHumanGate, domain.ReasonCancelled)
		events, err := one(r.Escalate(reason, "", now))
		return "escalate", events, err
	default:
		d := domain.ManualDecision{
			Moderator:       pick(rng, "alice", "bob", "carol", "alice", "bob", "carol", ""),
			State:           pick(rng, domain.DecisionAccepted, domain.DecisionRejected, domain.DecisionAccepted, domain.DecisionRejected, "pending"),
			ExpectedVersion: r.Version(),
		}
		if rng.IntN(8) == 0 {
			d.ExpectedVersion = rng.Uint64N(r.Version() + 2)
		}
		events, err := r.DecideManually(d, now)
		return "decide", events, err
	}
}

// moderate is a moderation team's command: a requeue (sometimes on a
// stale version), a claim, a release (sometimes by an admin), the record
// of an expiry, a hold or its end.
func (q *sequence) moderate() (string, []domain.Event, error) {
	r, rng, now := q.review, q.rng, q.now
	who := pick(rng, "alice", "bob", "carol")
	switch rng.IntN(6) {
	case 0:
		c := domain.RequeueCommand{By: who, ExpectedVersion: r.Version()}
		if rng.IntN(6) == 0 {
			c.ExpectedVersion = rng.Uint64N(r.Version() + 2)
		}
		events, err := one(r.Requeue(c, now))
		return "requeue", events, err
	case 1:
		events, err := one(r.Claim(who, time.Duration(1+rng.IntN(60))*time.Second, now))
		return "claim", events, err
	case 2:
		events, err := one(r.ReleaseClaim(who, rng.IntN(4) == 0, now))
		return "release", events, err
	case 3:
		if e, ok := r.ExpireClaim(now); ok {
			return "expire", []domain.Event{e}, nil
		}
		return "expire", nil, nil
	case 4:
		events, err := one(r.PutOnHold(domain.HoldCommand{By: who, Note: pick(rng, "legal", "")}, now))
		return "hold", events, err
	default:
		events, err := one(r.TakeOffHold(who, now))
		return "unhold", events, err
	}
}

// next asks the decider with random facts, checks what it answers, and
// carries the step out.
func (q *sequence) next() (string, []domain.Event, error) {
	r, rng, now := q.review, q.rng, q.now
	f := domain.Facts{RetryAllowed: rng.IntN(4) != 0, PayloadMissing: rng.IntN(20) == 0, Sweep: rng.IntN(10) == 0}
	if n, _, _, _ := r.InFlight(); n != 0 && rng.IntN(2) == 0 {
		f.Awaiting = n
	}
	st := domain.Next(r, now, f)
	name := "next " + st.Kind.String()
	if again := domain.Next(r, now, f); !reflect.DeepEqual(again, st) {
		return name, nil, fmt.Errorf("%w: Next answered %+v, then %+v", errInvariant, st, again)
	}
	if err := checkStep(r, now, f, st); err != nil {
		return name, nil, fmt.Errorf("%w: %+v for facts %+v: %v", errInvariant, st, f, err)
	}
	q.steps[st.Kind]++
	events, err := r.EventsFor(st, now)
	if err != nil {
		return name, nil, fmt.Errorf("%w: EventsFor(%+v): %v", errInvariant, st, err)
	}
	return name, events, nil
}

// errInvariant marks a broken promise of Next: never a refusal.
var errInvariant = errors.New("decider invariant")

// checkStep holds for every answer of Next.
func checkStep(r *domain.Review, now time.Time, f domain.Facts, st domain.Step) error {
	inFlight, _, started, timeout := r.InFlight()
	switch {
	case (r.State() == domain.StatePending) == (st.Kind == domain.StepNone):
		return fmt.Errorf("a %s review", r.State())
	case inFlight != 0 && st.Kind != domain.StepClose && st.Kind != domain.StepWait:
		return fmt.Errorf("attempt %d in flight", inFlight)
	}
	p := r.Policy()
	switch st.Kind {
	case domain.StepStart:
		switch {
		case st.Attempt != r.Attempts()+1 || r.RoundAttempts() >= p.MaxAttempts:
			return fmt.Errorf("attempt %d after %d (%d this round) of %d", st.Attempt, r.Attempts(), r.RoundAttempts(), p.MaxAttempts)
		case st.Timeout < time.Millisecond || st.Timeout > p.AttemptTimeout || now.Add(st.Timeout).After(r.Deadline()):
			return fmt.Errorf("timeout %s past the cap or the deadline", st.Timeout)
		case st.Retry && !f.RetryAllowed:
			return errors.New("a retry the budget does not allow")
		case st.Retry && r.LastFailure().Classification.Recovery():
			return errors.New("a recovery counted as a retry")
		}
	case domain.StepWait:
		end := started.Add(timeout)
		switch {
		case !st.Until.After(now):
			return errors.New("a wait that is over")
		case inFlight != 0 && (f.Awaiting != inFlight || !st.Until.Equal(end)):
			return errors.New("a wait other than for the callback of the attempt in flight")
		case inFlight == 0 && !st.Until.Before(r.Deadline()):
			return errors.New("a retry wait reaching the deadline")
		case inFlight == 0 && st.Until.Before(r.LastFailure().At.Add(p.Backoff.Initial)):
			return errors.New("a retry wait shorter than the backoff")
		}
	case domain.StepClose:
		if st.Attempt != inFlight || inFlight == 0 {
			return fmt.Errorf("closes attempt %d, %d in flight", st.Attempt, inFlight)
		}
	case domain.StepEscalate:
		if st.Reason == domain.ReasonRetryBudgetExhausted && f.RetryAllowed {
			return errors.New("retry budget exhausted while it allows")
		}
	}
	return nil
}

func (q *sequence) apply(events []domain.Event) error {
	for _, e := range events {
		rev := uint64(len(q.events))
		if err := q.review.Apply(rev, e); err != nil {
			return fmt.Errorf("a command's own event does not apply: %w", err)
		}
		q.events = append(q.events, e)
	}
	return nil
}

// check holds after every successful command.
// prior is where the review stood before a command.
type prior struct {
	state   domain.State
	version uint64
}

func (q *sequence) check(before prior, decisions int, name string) error {
	r := q.review
	switch {
	case decisions > 1:
		return fmt.Errorf("%d terminal decisions", decisions)
	case r.Version() != uint64(len(q.events)-1):
		return fmt.Errorf("version %d after %d events", r.Version(), len(q.events))
	case r.RoundAttempts() > q.policy.MaxAttempts:
		return fmt.Errorf("%d attempts in round %d with max_attempts %d", r.RoundAttempts(), r.Round(), q.policy.MaxAttempts)
	case r.State() == domain.StateAccepted && q.policy.HumanGate && r.DecidedBy() == "provider":
		return errors.New("the provider accepted a review of a human-gated class")
	case r.State() == domain.StatePending && before.state != domain.StatePending && (name != "requeue" || before.state != domain.StateManualReview):
		return fmt.Errorf("a %s review went back to pending by %s", before.state, name)
	case r.Version() > before.version && name != "requeue" && name != "decide" && r.Current(before.version) != coordinationOnly(q.events[before.version+1:]):
		return fmt.Errorf("version %d current after %s: %v", before.version, name, r.Current(before.version))
	}
	for _, e := range q.events[before.version+1:] {
		if s, ok := e.(domain.AttemptStarted); ok {
			end := s.StartedAt.Add(time.Duration(s.AttemptTimeoutMS) * time.Millisecond)
			if s.AttemptTimeoutMS < 1 || time.Duration(s.AttemptTimeoutMS)*time.Millisecond > q.policy.AttemptTimeout || end.After(r.Deadline()) {
				return fmt.Errorf("attempt %d of %d ms from +%s runs past the cap or the deadline", s.Attempt, s.AttemptTimeoutMS, s.StartedAt.Sub(t0))
			}
		}
		if d, ok := e.(domain.ManualDecisionRecorded); ok && q.policy.RequiredApprovals() > 1 && len(d.Approvers) != q.policy.RequiredApprovals() {
			return fmt.Errorf("decision with approvers %v on a class needing %d", d.Approvers, q.policy.RequiredApprovals())
		}
	}
	return nil
}

// coordinationOnly reports whether events are all claims and holds.
func coordinationOnly(events []domain.Event) bool {
	for _, e := range events {
		if !domain.Coordination(e) {
			return false
		}
	}
	return true
}

// checkHistory rebuilds the review from its events, directly and through
// their stored JSON, and compares it with the one built step by step.
func (q *sequence) checkHistory() error {
	direct, err := domain.Rehydrate(q.events)
	if err != nil {
		return fmt.Errorf("Rehydrate: %w", err)
	}
	if !reflect.DeepEqual(direct, q.review) {
		return fmt.Errorf("rehydrated %+v\nincremental %+v", direct, q.review)
	}
	stored := make([]domain.Event, len(q.events))
	for i, e := range q.events {
		b, err := domain.EncodeEvent(e)
		if err != nil {
			return err
		}
		if stored[i], err = domain.DecodeEvent(e.EventType(), b); err != nil {
			return err
		}
	}
	fromJSON, err := domain.Rehydrate(stored)
	if err != nil {
		return fmt.Errorf("Rehydrate from JSON: %w", err)
	}
	if !reflect.DeepEqual(fromJSON, q.review) {
		return fmt.Errorf("rehydrated from JSON %+v\nincremental %+v", fromJSON, q.review)
	}
	return nil
}

func (q *sequence) count(seen *outcomes) {
	r := q.review
	for k, n := range map[domain.StepKind]*int{domain.StepStart: &seen.nextStart, domain.StepWait: &seen.nextWait,
		domain.StepClose: &seen.nextClose, domain.StepEscalate: &seen.nextEscalate, domain.StepNone: &seen.nextNone} {
		if q.steps[k] > 0 {
			*n++
		}
	}
	switch {
	case r.State() == domain.StatePending:
		seen.stillPending++
	case r.State() == domain.StateManualReview:
		seen.stillQueued++
	case r.DecidedBy() == "provider" && r.State() == domain.StateAccepted:
		seen.acceptedByProvider++
	case r.DecidedBy() == "provider":
		seen.rejectedByProvider++
	case r.DecidedBy() == "policy":
		seen.rejectedByPolicy++
	default:
		seen.decidedByModerator++
		if q.policy.RequiredApprovals() > 1 {
			seen.fourEyesDecisions++
		}
	}
	if a := r.Approvals(); len(a[domain.DecisionAccepted]) > 0 && len(a[domain.DecisionRejected]) > 0 {
		seen.disagreements++
	}
	if r.Round() > 1 {
		seen.laterRound++
	}
	claimed, held := false, false
	for _, e := range q.events {
		switch e.(type) {
		case domain.Claimed:
			claimed = true
		case domain.Held:
			held = true
		}
	}
	if claimed {
		seen.claimed++
	}
	if held {
		seen.held++
	}
}

func isSentinel(err error) bool {
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

func pick[T any](rng *rand.Rand, choices ...T) T { return choices[rng.IntN(len(choices))] }
