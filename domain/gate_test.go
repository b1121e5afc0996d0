package domain_test

import (
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/domain"
)

func TestHeldByGate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		gate  bool
		state domain.Decision
		want  bool
	}{
		{gate: true, state: domain.DecisionAccepted, want: true},
		{gate: true, state: domain.DecisionRejected, want: false},
		{gate: false, state: domain.DecisionAccepted, want: false},
		{gate: false, state: domain.DecisionRejected, want: false},
	} {
		if got := domain.HeldByGate(tc.gate, tc.state); got != tc.want {
			t.Errorf("HeldByGate(%v, %s) = %v, want %v", tc.gate, tc.state, got, tc.want)
		}
		// The aggregate follows the same rule: a held finding is followed
		// by Escalated{human_gate}, any other finding decides.
		p := automated()
		p.HumanGate = tc.gate
		s := newStory(t, p).start(0)
		events, err := s.review.RecordFinding(finding(1, tc.state), domain.SourceResponse, at(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		held := len(events) == 2
		if held != tc.want {
			t.Errorf("gate %v, %s: RecordFinding returned %d events, held %v; HeldByGate says %v", tc.gate, tc.state, len(events), held, tc.want)
		}
		if held {
			if esc, ok := events[1].(domain.Escalated); !ok || esc.Reason != domain.ReasonHumanGate || esc.State != domain.StateManualReview {
				t.Errorf("held finding followed by %#v", events[1])
			}
		}
	}
}
