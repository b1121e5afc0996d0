package audit_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/api/audit"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/memstore"
)

var update = flag.Bool("update", false, "rewrite the golden files")

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// script writes a review's events through the ledger, one command at a time.
type script struct {
	t  testing.TB
	l  *ledger.Ledger
	rv *ledger.Snapshot
}

func newLedger(now *time.Time) *ledger.Ledger {
	store := memstore.New()
	store.Now = func() time.Time { return *now }
	l := ledger.New(store)
	n := 0
	l.NewID = func() string { n++; return fmt.Sprintf("00000000-0000-4000-8000-%012d", n) }
	return l
}

func (s *script) submit(id, class string, now time.Time) *script {
	s.t.Helper()
	cp, err := domain.DefaultPolicy().Class(class)
	if err != nil {
		s.t.Fatal(err)
	}
	if class == "publishing_rule" {
		cp.Approvals = 2 // four-eyes, as a policy file would set it
	}
	e, err := domain.Submit(domain.SubmitCommand{ReviewID: id, ContentClass: class, ContentType: "text/plain",
		PayloadDigest: "sha256:0f", PayloadBytes: 5, Policy: cp, SubmittedBy: "platform", Now: now})
	if err != nil {
		s.t.Fatal(err)
	}
	if s.rv, err = s.l.Create(context.Background(), e, ledger.Actor{Name: "platform", RequestID: "req-1"}); err != nil {
		s.t.Fatal(err)
	}
	return s
}

func (s *script) add(actor string, e domain.Event, err error) *script {
	s.t.Helper()
	return s.addAll(actor, []domain.Event{e}, err)
}

func (s *script) addAll(actor string, es []domain.Event, err error) *script {
	s.t.Helper()
	if err != nil {
		s.t.Fatal(err)
	}
	if s.rv, err = s.l.Append(context.Background(), s.rv, ledger.Actor{Name: actor}, es...); err != nil {
		s.t.Fatal(err)
	}
	return s
}

func (s *script) attempt(now time.Time) *script {
	e, err := s.rv.StartAttempt(now)
	return s.add("runner", e, err)
}

func (s *script) timeout(n int, c domain.Classification, now time.Time) *script {
	e, err := s.rv.TimeOutAttempt(domain.AttemptFailure{Attempt: n, Classification: c, Detail: "http 503"}, now)
	return s.add("runner", e, err)
}

func (s *script) escalate(r domain.EscalationReason, now time.Time) *script {
	e, err := s.rv.Escalate(r, "", now)
	return s.add("runner", e, err)
}

func (s *script) decide(moderator string, d domain.Decision, note string, now time.Time) *script {
	s.t.Helper()
	evs, err := s.rv.DecideManually(domain.ManualDecision{Moderator: moderator, State: d, Note: note, ExpectedVersion: s.rv.Version()}, now)
	if err != nil || len(evs) != 1 {
		s.t.Fatalf("decide: %v %v", evs, err)
	}
	return s.add(moderator, evs[0], nil)
}

func (s *script) find(n int, d domain.Decision, now time.Time) *script {
	s.t.Helper()
	es, err := s.rv.RecordFinding(domain.Finding{ReviewID: s.rv.ID(), Attempt: n, State: d, Reasons: []string{"policy-7"}}, domain.SourceCallback, now)
	return s.addAll("provider", es, err)
}

// timeouts: three attempts time out, the review escalates and a moderator
// rejects it.
func timeouts(t testing.TB, l *ledger.Ledger) {
	s := &script{t: t, l: l}
	s.submit("cap-1", "caption_suggestion", at(0)).
		attempt(at(5)).timeout(1, domain.ClassDeadlineExceeded, at(10005)).
		attempt(at(10180)).timeout(2, domain.ClassProviderUnavailable, at(10400)).
		attempt(at(10700)).timeout(3, domain.ClassTransportError, at(12000)).
		escalate(domain.ReasonAttemptsExhausted, at(12001)).
		decide("mona", domain.DecisionRejected, "links to a scam", at(95000))
}

// fourEyes: an accepted finding on a human-gated class needs two
// moderators.
func fourEyes(t testing.TB, l *ledger.Ledger) {
	s := &script{t: t, l: l}
	s.submit("rule-1", "publishing_rule", at(0)).
		attempt(at(3)).find(1, domain.DecisionAccepted, at(850)).
		decide("mona", domain.DecisionAccepted, "ok", at(60000)).
		decide("max", domain.DecisionAccepted, "", at(120000))
}

// requeued: an outage escalates the review; a moderator claims it, puts it
// on hold, releases it and requeues it; the recovered provider decides
// round 2.
func requeued(t testing.TB, l *ledger.Ledger) {
	s := &script{t: t, l: l}
	s.submit("cap-2", "caption_suggestion", at(0)).
		attempt(at(5)).timeout(1, domain.ClassProviderUnavailable, at(400)).
		escalate(domain.ReasonRetryBudgetExhausted, at(401))
	claim, err := s.rv.Claim("mona", 10*time.Minute, at(60000))
	s.add("mona", claim, err)
	hold, err := s.rv.PutOnHold(domain.HoldCommand{By: "mona", Note: "provider outage"}, at(61000))
	s.add("mona", hold, err)
	unhold, err := s.rv.TakeOffHold("mona", at(600000))
	s.add("mona", unhold, err)
	release, err := s.rv.ReleaseClaim("mona", false, at(600500))
	s.add("mona", release, err)
	requeue, err := s.rv.Requeue(domain.RequeueCommand{By: "mona", Note: "provider back", ExpectedVersion: 3}, at(601000))
	s.add("mona", requeue, err)
	s.attempt(at(601010)).find(2, domain.DecisionAccepted, at(601500))
}

// failover: the primary provider refuses the first attempt and the review
// fails over to its fallback, which decides; each attempt names its
// provider.
func failover(t testing.TB, l *ledger.Ledger) {
	s := &script{t: t, l: l}
	s.submit("cap-3", "caption_suggestion", at(0)).
		attemptOn("primary", at(5)).timeout(1, domain.ClassProviderUnavailable, at(40)).
		attemptOn("backup", at(41)).find(2, domain.DecisionAccepted, at(300))
}

func (s *script) attemptOn(provider string, now time.Time) *script {
	e, err := s.rv.StartAttempt(now)
	e.Provider = provider
	return s.add("runner", e, err)
}

func TestReplayGolden(t *testing.T) {
	now := t0
	l := newLedger(&now)
	timeouts(t, l)
	fourEyes(t, l)
	requeued(t, l)
	failover(t, l)
	for _, tc := range []struct {
		name, id string
		asOf     time.Time
	}{
		{"replay_timeouts", "cap-1", time.Time{}},
		{"replay_timeouts_as_of", "cap-1", at(10500)},
		{"replay_four_eyes", "rule-1", time.Time{}},
		{"replay_four_eyes_one_vote", "rule-1", at(90000)},
		{"replay_requeued", "cap-2", time.Time{}},
		{"replay_requeued_on_hold", "cap-2", at(90000)},
		{"replay_failover", "cap-3", time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := l.History(context.Background(), tc.id)
			if err != nil {
				t.Fatal(err)
			}
			r, err := audit.NewReplay(h, tc.asOf)
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if err := r.Render(&buf); err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name, buf.Bytes())
		})
	}
	h, err := l.History(context.Background(), "cap-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := audit.NewReplay(h, t0.Add(-time.Second)); err == nil {
		t.Fatal("replay before submission succeeded")
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (go test -update rewrites it)\ngot:\n%s\nwant:\n%s", name, got, want)
	}
}
