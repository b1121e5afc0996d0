package domain_test

import (
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/domain"
)

// Two findings are the same when review, attempt, state and reasons are;
// where they came from is not part of them.
func TestFindingEqual(t *testing.T) {
	t.Parallel()
	base := domain.Finding{ReviewID: "r", Attempt: 2, State: domain.DecisionRejected, Reasons: []string{"a", "b"}}
	for _, tc := range []struct {
		name string
		g    domain.Finding
		want bool
	}{
		{"the same", domain.Finding{ReviewID: "r", Attempt: 2, State: domain.DecisionRejected, Reasons: []string{"a", "b"}}, true},
		{"another review", domain.Finding{ReviewID: "s", Attempt: 2, State: domain.DecisionRejected, Reasons: []string{"a", "b"}}, false},
		{"another attempt", domain.Finding{ReviewID: "r", Attempt: 1, State: domain.DecisionRejected, Reasons: []string{"a", "b"}}, false},
		{"another state", domain.Finding{ReviewID: "r", Attempt: 2, State: domain.DecisionAccepted, Reasons: []string{"a", "b"}}, false},
		{"fewer reasons", domain.Finding{ReviewID: "r", Attempt: 2, State: domain.DecisionRejected, Reasons: []string{"a"}}, false},
		{"reasons in another order", domain.Finding{ReviewID: "r", Attempt: 2, State: domain.DecisionRejected, Reasons: []string{"b", "a"}}, false},
	} {
		if got := base.Equal(tc.g); got != tc.want {
			t.Errorf("%s: Equal = %v, want %v", tc.name, got, tc.want)
		}
		if got := tc.g.Equal(base); got != tc.want {
			t.Errorf("%s, the other way: Equal = %v, want %v", tc.name, got, tc.want)
		}
	}
	none := domain.Finding{ReviewID: "r", Attempt: 1, State: domain.DecisionAccepted}
	if !none.Equal(domain.Finding{ReviewID: "r", Attempt: 1, State: domain.DecisionAccepted, Reasons: []string{}}) {
		t.Error("no reasons and an empty list differ")
	}
}

// The finding a FindingReceived records reads back equal to the one
// recorded, whatever its source, with no reasons or some.
func TestFindingReceivedFinding(t *testing.T) {
	t.Parallel()
	for _, source := range []string{domain.SourceResponse, domain.SourceCallback} {
		for _, reasons := range [][]string{nil, {"policy:ok", "lang:en"}} {
			s := newStory(t, automated()).start(0)
			f := domain.Finding{ReviewID: testID, Attempt: 1, State: domain.DecisionRejected, Reasons: reasons}
			events, err := s.review.RecordFinding(f, source, at(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if got := events[0].(domain.FindingReceived).Finding(); !got.Equal(f) {
				t.Errorf("%s, reasons %v: recorded %+v, want %+v", source, reasons, got, f)
			}
		}
	}
}
