package audit_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/api/audit"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/pgstore"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// The refused completions of a review follow its timeline in the replay;
// the timeline and its state are those of the review stream alone.
func TestReplayShowsConflicts(t *testing.T) {
	now := t0
	l := newLedger(&now)
	ctx := context.Background()
	s := &script{t: t, l: l}
	s.submit("cap-2", "caption_suggestion", at(0)).
		attempt(at(5)).timeout(1, domain.ClassDeadlineExceeded, at(10005)).
		attempt(at(10180))
	conflict := func(c domain.Conflict, ms int, actor string) {
		t.Helper()
		e, err := s.rv.RecordConflict(c, at(ms))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.RecordConflict(ctx, e, ledger.Actor{Name: actor}); err != nil {
			t.Fatal(err)
		}
	}
	// Attempt 1's finding arrives while attempt 2 is in flight.
	conflict(domain.Conflict{Attempt: 1, Source: domain.SourceCallback, Reason: domain.ConflictAttemptNotInFlight,
		State: domain.DecisionAccepted, Detail: "attempt is not the one in flight"}, 10300, "provider")
	s.find(2, domain.DecisionRejected, at(11000))
	conflict(domain.Conflict{Attempt: 2, Source: domain.SourceCallback, Reason: domain.ConflictDuplicateDelivery,
		Detail: "webhook delivered again"}, 11500, "provider")

	for _, tc := range []struct {
		name string
		asOf time.Time
	}{{"replay_conflicts", time.Time{}}, {"replay_conflicts_as_of", at(10500)}} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := l.History(ctx, "cap-2")
			if err != nil {
				t.Fatal(err)
			}
			r, err := audit.NewReplay(h, tc.asOf)
			if err != nil {
				t.Fatal(err)
			}
			log, err := l.Conflicts(ctx, "cap-2")
			if err != nil {
				t.Fatal(err)
			}
			r.AddConflicts(log)
			var buf bytes.Buffer
			if err := r.Render(&buf); err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name, buf.Bytes())
		})
	}

	// A review without conflicts says so.
	h, err := l.History(ctx, "cap-2")
	if err != nil {
		t.Fatal(err)
	}
	r, err := audit.NewReplay(h, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	r.AddConflicts(&ledger.ConflictLog{ReviewID: "cap-2"})
	var buf bytes.Buffer
	if err := r.Render(&buf); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(buf.Bytes(), []byte("\nconflicting completions: none\n")) {
		t.Fatalf("no 'conflicting completions: none' in\n%s", buf.String())
	}
}

// audit verify checks conflict streams' hash chains too, without counting
// them as reviews.
func TestVerifyFindsAlteredConflicts(t *testing.T) {
	ctx := context.Background()
	pool := dbtest.Pool(t)
	store := pgstore.New(pool, pgstore.Config{})
	t.Cleanup(store.Close)
	l := ledger.New(store)
	for _, id := range []string{"c-intact", "c-altered"} {
		sample(t, l, id)
		rv, err := l.Load(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, reason := range []domain.ConflictReason{domain.ConflictReviewMovedOn, domain.ConflictDuplicateDelivery} {
			e, err := rv.RecordConflict(domain.Conflict{Attempt: 3, Source: domain.SourceCallback, Reason: reason}, at(96000))
			if err != nil {
				t.Fatal(err)
			}
			if err := l.RecordConflict(ctx, e, ledger.Actor{Name: "provider"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	v := &audit.Verifier{Store: store, Histories: l}
	rep, err := v.Verify(ctx, "")
	if err != nil || rep.Err() != nil || rep.Reviews != 2 || rep.Events != 2*9+2*2 {
		t.Fatalf("intact ledger: %+v %v %v", rep, err, rep.Err())
	}
	if _, err := pool.Exec(ctx, `UPDATE event SET data = convert_to(replace(convert_from(data, 'UTF8'), 'review_moved_on', 'duplicate_delivery'), 'UTF8')
		WHERE stream = 'conflicts-c-altered' AND revision = 0`); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"", "c-altered"} {
		rep, err := v.Verify(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Damaged) != 1 || rep.Damaged[0].ReviewID != "c-altered" || rep.Damaged[0].Revision != 0 || !errors.Is(rep.Err(), audit.ErrDamaged) {
			t.Fatalf("verify %q: %+v", id, rep.Damaged)
		}
	}
	if rep, err := v.Verify(ctx, "c-intact"); err != nil || rep.Err() != nil {
		t.Fatalf("verify c-intact: %v %v", err, rep.Err())
	}
}

// audit verify checks shadow streams' hash chains too: an altered shadow
// observation (its finding turned around) is damage to its review.
func TestVerifyFindsAlteredShadows(t *testing.T) {
	ctx := context.Background()
	pool := dbtest.Pool(t)
	store := pgstore.New(pool, pgstore.Config{})
	t.Cleanup(store.Close)
	l := ledger.New(store)
	for _, id := range []string{"s-intact", "s-altered"} {
		sample(t, l, id)
		rv, err := l.Load(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"candidate", "rival"} {
			e, err := rv.ObserveShadow(domain.ShadowResult{Provider: p, Outcome: domain.ShadowFinding, State: domain.DecisionAccepted,
				StartedAt: at(1000), Took: 40 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if err := l.RecordShadow(ctx, e, ledger.Actor{Name: "shadow"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	v := &audit.Verifier{Store: store, Histories: l}
	rep, err := v.Verify(ctx, "")
	if err != nil || rep.Err() != nil || rep.Reviews != 2 || rep.Events != 2*9+2*2 {
		t.Fatalf("intact ledger: %+v %v %v", rep, err, rep.Err())
	}
	if _, err := pool.Exec(ctx, `UPDATE event SET data = convert_to(replace(convert_from(data, 'UTF8'), 'accepted', 'rejected'), 'UTF8')
		WHERE stream = 'shadows-s-altered' AND revision = 1`); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"", "s-altered"} {
		rep, err := v.Verify(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Damaged) != 1 || rep.Damaged[0].ReviewID != "s-altered" || rep.Damaged[0].Revision != 1 ||
			!strings.HasPrefix(rep.Damaged[0].Reason, "shadow observations: ") || !errors.Is(rep.Err(), audit.ErrDamaged) {
			t.Fatalf("verify %q: %+v", id, rep.Damaged)
		}
	}
	if rep, err := v.Verify(ctx, "s-intact"); err != nil || rep.Err() != nil {
		t.Fatalf("verify s-intact: %v %v", err, rep.Err())
	}
}
