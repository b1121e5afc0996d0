package audit_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/api/audit"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

// A review's shadow observations follow its timeline in the replay (those
// whose call ended by the replay's time); the timeline and its state are
// those of the review stream alone. A review without any prints none.
func TestReplayShowsShadows(t *testing.T) {
	now := t0
	l := newLedger(&now)
	ctx := context.Background()
	s := &script{t: t, l: l}
	s.submit("cap-3", "caption_suggestion", at(0))
	start, err := s.rv.StartAttempt(at(5))
	start.Provider, start.Shadows = "managed", []string{"candidate", "rival"}
	s.add("runner", start, err)
	observe := func(r domain.ShadowResult) {
		t.Helper()
		e, err := s.rv.ObserveShadow(r)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.RecordShadow(ctx, e, ledger.Actor{Name: "shadow"}); err != nil {
			t.Fatal(err)
		}
	}
	observe(domain.ShadowResult{Provider: "candidate", Outcome: domain.ShadowFinding, State: domain.DecisionRejected,
		Reasons: []string{"policy:spam"}, StartedAt: at(5), Took: 420 * time.Millisecond})
	s.find(1, domain.DecisionAccepted, at(900))
	observe(domain.ShadowResult{Provider: "rival", Outcome: domain.ShadowTimeout, Classification: domain.ClassDeadlineExceeded,
		Detail: "no answer before the shadow's timeout", StartedAt: at(5), Took: 10 * time.Second})

	for _, tc := range []struct {
		name string
		asOf time.Time
	}{{"replay_shadows", time.Time{}}, {"replay_shadows_as_of", at(1000)}} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := l.History(ctx, "cap-3")
			if err != nil {
				t.Fatal(err)
			}
			r, err := audit.NewReplay(h, tc.asOf)
			if err != nil {
				t.Fatal(err)
			}
			log, err := l.Shadows(ctx, "cap-3")
			if err != nil {
				t.Fatal(err)
			}
			r.AddShadows(log)
			var buf bytes.Buffer
			if err := r.Render(&buf); err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name, buf.Bytes())
		})
	}

	h, err := l.History(ctx, "cap-3")
	if err != nil {
		t.Fatal(err)
	}
	r, err := audit.NewReplay(h, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	r.AddShadows(&ledger.SideLog{ReviewID: "cap-3"})
	var buf bytes.Buffer
	if err := r.Render(&buf); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(buf.Bytes(), []byte("shadow observations")) {
		t.Fatalf("a review without shadow observations shows a section of them:\n%s", buf.String())
	}
}
