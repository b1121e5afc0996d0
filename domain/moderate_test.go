package domain_test

import (
	"errors"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/domain"
)

func (s *story) requeue(by string, now time.Duration) *story {
	s.tb.Helper()
	e, err := s.review.Requeue(domain.RequeueCommand{By: by, Note: "provider back", ExpectedVersion: s.review.Version()}, at(now))
	if err != nil {
		s.tb.Fatalf("Requeue at %s: %v", now, err)
	}
	s.apply(e)
	return s
}

func (s *story) claim(moderator string, now time.Duration) *story {
	s.tb.Helper()
	e, err := s.review.Claim(moderator, 10*time.Minute, at(now))
	if err != nil {
		s.tb.Fatalf("Claim %s at %s: %v", moderator, now, err)
	}
	s.apply(e)
	return s
}

// TestRequeueStartsARound checks that a requeued review is pending with a
// fresh budget, numbers its attempts on, and gets max_attempts anew.
func TestRequeueStartsARound(t *testing.T) {
	t.Parallel()
	s := newStory(t, automated()).toManual()
	seen := s.review.Version()
	s.requeue("mia", time.Hour)
	r := s.review
	if r.State() != domain.StatePending || r.Round() != 2 || r.RoundAttempts() != 0 || r.Attempts() != 1 {
		t.Fatalf("after requeue: state %s round %d round attempts %d attempts %d", r.State(), r.Round(), r.RoundAttempts(), r.Attempts())
	}
	if want := at(time.Hour + 30*time.Second); !r.Deadline().Equal(want) {
		t.Fatalf("deadline %s, want %s", r.Deadline(), want)
	}
	if r.EscalationReason() != "" || r.Current(seen) {
		t.Fatalf("escalation %q kept, or version %d still current", r.EscalationReason(), seen)
	}
	// The round's first attempt is not a retry, and is numbered on.
	st := domain.Next(r, at(time.Hour), domain.Facts{})
	if st.Kind != domain.StepStart || st.Attempt != 2 || st.Retry {
		t.Fatalf("Next after requeue = %+v, want a first start of attempt 2", st)
	}
	// Three attempts in round 2 (attempts 2, 3, 4) even though round 1
	// made one: max_attempts is per round.
	s.start(time.Hour).timeOut(2, time.Hour+time.Second)
	for n := 3; n <= 4; n++ {
		now := time.Hour + time.Duration(n)*3*time.Second
		st := domain.Next(s.review, at(now), domain.Facts{RetryAllowed: true})
		if st.Kind != domain.StepStart || st.Attempt != n {
			t.Fatalf("round 2, attempt %d: Next = %+v", n, st)
		}
		s.apply(mustEvents(t, s.review, st, at(now)))
		s.timeOut(n, now+time.Second)
	}
	st = domain.Next(s.review, at(time.Hour+20*time.Second), domain.Facts{RetryAllowed: true})
	if st.Kind != domain.StepEscalate || st.Reason != domain.ReasonAttemptsExhausted {
		t.Fatalf("after the round's attempts: Next = %+v, want attempts_exhausted", st)
	}
	if _, err := s.review.StartAttempt(at(time.Hour + 20*time.Second)); !errors.Is(err, domain.ErrAttemptsExhausted) {
		t.Fatalf("StartAttempt past the round's attempts = %v", err)
	}
	if _, err := domain.Rehydrate(s.events); err != nil {
		t.Fatalf("history does not load: %v", err)
	}
}

func mustEvents(t *testing.T, r *domain.Review, st domain.Step, now time.Time) domain.Event {
	t.Helper()
	evs, err := r.EventsFor(st, now)
	if err != nil || len(evs) != 1 {
		t.Fatalf("EventsFor %+v: %v %v", st, evs, err)
	}
	return evs[0]
}

// TestRequeueKeepsGateAndFailClosed checks that a new round obeys the
// class: a human-gated accept still goes to a moderator and a fail-closed
// class's exhausted round is rejected.
func TestRequeueKeepsGateAndFailClosed(t *testing.T) {
	t.Parallel()
	g := newStory(t, gated()).toManual().requeue("mia", time.Hour).start(time.Hour).find(2, domain.DecisionAccepted, time.Hour+time.Second)
	if g.review.State() != domain.StateManualReview || g.review.EscalationReason() != domain.ReasonHumanGate || g.review.Round() != 2 {
		t.Fatalf("gated accept in round 2: state %s, escalation %q", g.review.State(), g.review.EscalationReason())
	}

	fc := newStory(t, failClosed()).start(0).timeOut(1, time.Second).escalate(domain.ReasonProviderRefused, time.Second)
	if fc.review.State() != domain.StateManualReview {
		t.Fatalf("provider_refused on a fail-closed class: %s", fc.review.State())
	}
	fc.requeue("mia", time.Hour)
	e, err := fc.review.Escalate(domain.ReasonAttemptsExhausted, "", at(time.Hour+time.Minute))
	if err != nil || e.State != domain.StateRejected {
		t.Fatalf("exhausted round on a fail-closed class: %+v %v, want rejected", e, err)
	}
}

func TestRequeueRefusals(t *testing.T) {
	t.Parallel()
	pending := newStory(t, automated())
	if _, err := pending.review.Requeue(domain.RequeueCommand{By: "mia"}, at(time.Second)); !errors.Is(err, domain.ErrNotInManualReview) {
		t.Fatalf("requeue of a pending review = %v", err)
	}
	if _, err := (&domain.Review{}).Requeue(domain.RequeueCommand{By: "mia"}, t0); !errors.Is(err, domain.ErrReviewNotFound) {
		t.Fatalf("requeue of nothing = %v", err)
	}
	q := newStory(t, automated()).toManual()
	stale := q.review.Version() - 1
	if _, err := q.review.Requeue(domain.RequeueCommand{By: "mia", ExpectedVersion: stale}, at(time.Hour)); !errors.Is(err, domain.ErrVersionMismatch) {
		t.Fatalf("stale requeue = %v", err)
	}
	q.claim("sam", time.Minute)
	_, err := q.review.Requeue(domain.RequeueCommand{By: "mia", ExpectedVersion: q.review.Version()}, at(2*time.Minute))
	var held *domain.ClaimedError
	if !errors.As(err, &held) || held.Moderator != "sam" || !errors.Is(err, domain.ErrClaimedByOther) {
		t.Fatalf("requeue under another's claim = %v", err)
	}
	// Once the claim has expired, anyone may requeue.
	if _, err := q.review.Requeue(domain.RequeueCommand{By: "mia", ExpectedVersion: q.review.Version()}, at(12*time.Minute)); err != nil {
		t.Fatalf("requeue after the claim expired = %v", err)
	}
	decided := newStory(t, automated()).toManual().vote("sam", domain.DecisionAccepted, time.Minute)
	if _, err := decided.review.Requeue(domain.RequeueCommand{By: "mia", ExpectedVersion: decided.review.Version()}, at(time.Hour)); !errors.Is(err, domain.ErrNotInManualReview) {
		t.Fatalf("requeue of a decided review = %v", err)
	}
}

// TestCoordinationKeepsVersionCurrent checks that claims and holds do not
// make a moderator's expected version stale, and that anything else does.
func TestCoordinationKeepsVersionCurrent(t *testing.T) {
	t.Parallel()
	s := newStory(t, fourEyes()).toManual()
	seen := s.review.Version()
	s.claim("sam", time.Minute)
	h, err := s.review.PutOnHold(domain.HoldCommand{By: "sam", Note: "legal"}, at(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	s.apply(h)
	if !s.review.Current(seen) || s.review.Version() != seen+2 {
		t.Fatalf("after a claim and a hold: version %d, %d current %v", s.review.Version(), seen, s.review.Current(seen))
	}
	s.apply(mustDecide(t, s.review, domain.ManualDecision{Moderator: "sam", State: domain.DecisionAccepted, ExpectedVersion: seen}, at(3*time.Minute))...)
	if s.review.Current(seen) {
		t.Fatal("a vote left the old version current")
	}
	if _, err := s.review.DecideManually(domain.ManualDecision{Moderator: "ann", State: domain.DecisionAccepted, ExpectedVersion: seen}, at(4*time.Minute)); !errors.Is(err, domain.ErrVersionMismatch) {
		t.Fatalf("decision on the version before the vote = %v", err)
	}
	if s.review.CurrentClaim() != nil {
		t.Fatal("the voter's claim outlived the vote")
	}
}

func mustDecide(t *testing.T, r *domain.Review, d domain.ManualDecision, now time.Time) []domain.Event {
	t.Helper()
	evs, err := r.DecideManually(d, now)
	if err != nil {
		t.Fatalf("DecideManually %+v: %v", d, err)
	}
	return evs
}

// TestClaimsRequired checks that on a class with claims: required only the
// live claim's holder decides, and each four-eyes approver claims in turn.
func TestClaimsRequired(t *testing.T) {
	t.Parallel()
	p := fourEyes()
	p.Claims = domain.ClaimsRequired
	s := newStory(t, p).toManual()
	d := func(who string) domain.ManualDecision {
		return domain.ManualDecision{Moderator: who, State: domain.DecisionAccepted, ExpectedVersion: s.review.Version()}
	}
	if _, err := s.review.DecideManually(d("sam"), at(time.Minute)); !errors.Is(err, domain.ErrClaimRequired) {
		t.Fatalf("decision without a claim = %v", err)
	}
	s.claim("sam", time.Minute)
	_, err := s.review.DecideManually(d("ann"), at(2*time.Minute))
	var held *domain.ClaimedError
	if !errors.As(err, &held) || held.Moderator != "sam" {
		t.Fatalf("decision under sam's claim = %v, want one naming sam", err)
	}
	if _, err := s.review.Claim("ann", 10*time.Minute, at(2*time.Minute)); !errors.As(err, &held) {
		t.Fatalf("ann claiming sam's live claim = %v", err)
	}
	s.apply(mustDecide(t, s.review, d("sam"), at(2*time.Minute))...)
	// sam's vote ended sam's claim: ann claims and decides.
	if _, err := s.review.DecideManually(d("ann"), at(3*time.Minute)); !errors.Is(err, domain.ErrClaimRequired) {
		t.Fatalf("second approver without a claim = %v", err)
	}
	s.claim("ann", 3*time.Minute)
	s.apply(mustDecide(t, s.review, d("ann"), at(4*time.Minute))...)
	if s.review.State() != domain.StateAccepted {
		t.Fatalf("state %s after two approvals", s.review.State())
	}
	// An expired claim is no claim.
	e := newStory(t, p).toManual().claim("sam", time.Minute)
	if _, err := e.review.DecideManually(domain.ManualDecision{Moderator: "sam", State: domain.DecisionRejected, ExpectedVersion: e.review.Version()}, at(12*time.Minute)); !errors.Is(err, domain.ErrClaimRequired) {
		t.Fatalf("decision on an expired claim = %v", err)
	}
	// Optional claims: decisions ignore them, as before.
	o := newStory(t, automated()).toManual().claim("sam", time.Minute)
	if _, err := o.review.DecideManually(domain.ManualDecision{Moderator: "ann", State: domain.DecisionRejected, ExpectedVersion: o.review.Version()}, at(2*time.Minute)); err != nil {
		t.Fatalf("optional claims: decision under another's claim = %v", err)
	}
}

func TestClaimReleaseAndExpiry(t *testing.T) {
	t.Parallel()
	s := newStory(t, automated()).toManual().claim("sam", time.Minute)
	// Renewal keeps when the claim began.
	s.claim("sam", 5*time.Minute)
	if c := s.review.CurrentClaim(); c == nil || !c.Since.Equal(at(time.Minute)) || !c.ExpiresAt.Equal(at(15*time.Minute)) {
		t.Fatalf("renewed claim = %+v", c)
	}
	if _, err := s.review.ReleaseClaim("ann", false, at(6*time.Minute)); !errors.Is(err, domain.ErrClaimedByOther) {
		t.Fatalf("ann releasing sam's claim = %v", err)
	}
	if _, ok := s.review.ExpireClaim(at(14 * time.Minute)); ok {
		t.Fatal("a live claim expired")
	}
	rel, err := s.review.ReleaseClaim("root", true, at(6*time.Minute))
	if err != nil || rel.Moderator != "sam" || rel.By != "root" || rel.Reason != domain.ReleaseReleased {
		t.Fatalf("admin release = %+v, %v", rel, err)
	}
	s.apply(rel)
	if _, err := s.review.ReleaseClaim("sam", false, at(7*time.Minute)); !errors.Is(err, domain.ErrNotClaimed) {
		t.Fatalf("release of no claim = %v", err)
	}
	s.claim("ann", 8*time.Minute)
	exp, ok := s.review.ExpireClaim(at(18 * time.Minute))
	if !ok || exp.Moderator != "ann" || exp.By != domain.SystemActor || exp.Reason != domain.ReleaseExpired {
		t.Fatalf("expiry = %+v %v", exp, ok)
	}
	s.apply(exp)
	if s.review.CurrentClaim() != nil {
		t.Fatal("claim kept after its expiry was recorded")
	}
}

func TestHolds(t *testing.T) {
	t.Parallel()
	s := newStory(t, automated()).toManual()
	if _, err := s.review.PutOnHold(domain.HoldCommand{By: "sam"}, at(time.Minute)); !errors.Is(err, domain.ErrInvalidDecision) {
		t.Fatalf("hold without a note = %v", err)
	}
	if _, err := s.review.TakeOffHold("sam", at(time.Minute)); !errors.Is(err, domain.ErrNotHeld) {
		t.Fatalf("unhold of a review not held = %v", err)
	}
	h, err := s.review.PutOnHold(domain.HoldCommand{By: "sam", Note: "legal"}, at(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	s.apply(h)
	if _, err := s.review.PutOnHold(domain.HoldCommand{By: "ann", Note: "again"}, at(2*time.Minute)); !errors.Is(err, domain.ErrAlreadyHeld) {
		t.Fatalf("hold of a held review = %v", err)
	}
	if got := s.review.Hold(); got == nil || got.By != "sam" || got.Note != "legal" {
		t.Fatalf("hold = %+v", got)
	}
	u, err := s.review.TakeOffHold("ann", at(3*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	s.apply(u)
	if s.review.Hold() != nil {
		t.Fatal("still held")
	}
	// A held review requeued or decided is no longer held.
	s.apply(mustHold(t, s.review, "sam", 4*time.Minute))
	s.requeue("sam", 5*time.Minute)
	if s.review.Hold() != nil || s.review.CurrentClaim() != nil {
		t.Fatal("hold or claim survived the requeue")
	}
	// claims: required: a hold needs the caller's claim.
	p := automated()
	p.Claims = domain.ClaimsRequired
	r := newStory(t, p).toManual()
	if _, err := r.review.PutOnHold(domain.HoldCommand{By: "sam", Note: "x"}, at(time.Minute)); !errors.Is(err, domain.ErrClaimRequired) {
		t.Fatalf("hold without a claim on a required class = %v", err)
	}
}

func mustHold(t *testing.T, r *domain.Review, by string, now time.Duration) domain.Event {
	t.Helper()
	h, err := r.PutOnHold(domain.HoldCommand{By: by, Note: "wait"}, at(now))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestApplyRefusesImpossibleModeration checks that histories no command
// could have written fail to load.
func TestApplyRefusesImpossibleModeration(t *testing.T) {
	t.Parallel()
	queued := func() *story { return newStory(t, automated()).toManual() }
	for _, tc := range []struct {
		name  string
		base  func() *story
		event domain.Event
	}{
		{"requeue of a pending review", func() *story { return newStory(t, automated()) },
			domain.Requeued{ReviewID: testID, By: "m", Round: 2, Deadline: at(time.Hour), At: at(time.Minute)}},
		{"requeue skipping a round", queued,
			domain.Requeued{ReviewID: testID, By: "m", Round: 3, Deadline: at(time.Hour), At: at(time.Minute)}},
		{"requeue with a deadline in the past", queued,
			domain.Requeued{ReviewID: testID, By: "m", Round: 2, Deadline: at(time.Minute), At: at(time.Minute)}},
		{"claim of a pending review", func() *story { return newStory(t, automated()) },
			domain.Claimed{ReviewID: testID, Moderator: "m", ClaimedAt: t0, ExpiresAt: at(time.Minute)}},
		{"claim over another's live claim", func() *story { return queued().claim("sam", time.Minute) },
			domain.Claimed{ReviewID: testID, Moderator: "ann", ClaimedAt: at(2 * time.Minute), ExpiresAt: at(12 * time.Minute)}},
		{"claim ending before it starts", queued,
			domain.Claimed{ReviewID: testID, Moderator: "ann", ClaimedAt: at(2 * time.Minute), ExpiresAt: at(2 * time.Minute)}},
		{"release of no claim", queued,
			domain.ClaimReleased{ReviewID: testID, Moderator: "sam", By: "sam", Reason: domain.ReleaseReleased, At: at(time.Minute)}},
		{"release of another's claim", func() *story { return queued().claim("sam", time.Minute) },
			domain.ClaimReleased{ReviewID: testID, Moderator: "ann", By: "ann", Reason: domain.ReleaseReleased, At: at(2 * time.Minute)}},
		{"expiry of a live claim", func() *story { return queued().claim("sam", time.Minute) },
			domain.ClaimReleased{ReviewID: testID, Moderator: "sam", By: "system", Reason: domain.ReleaseExpired, At: at(2 * time.Minute)}},
		{"release for an unknown reason", func() *story { return queued().claim("sam", time.Minute) },
			domain.ClaimReleased{ReviewID: testID, Moderator: "sam", By: "sam", Reason: "bored", At: at(2 * time.Minute)}},
		{"hold without a note", queued, domain.Held{ReviewID: testID, By: "sam", At: at(time.Minute)}},
		{"unhold of a review not held", queued, domain.Unheld{ReviewID: testID, By: "sam", At: at(time.Minute)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := tc.base()
			if err := s.review.Apply(uint64(len(s.events)), tc.event); !errors.Is(err, domain.ErrCorruptHistory) {
				t.Fatalf("Apply = %v, want ErrCorruptHistory", err)
			}
		})
	}
}
