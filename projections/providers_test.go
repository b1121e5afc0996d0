package projections

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reviewledger/reviewledger/domain"
)

// providerBatches applies each batch of events, in one transaction each,
// to the live tables of the providers projection.
func providerBatches(t *testing.T, e *env, batches ...[]event) {
	t.Helper()
	ctx := context.Background()
	for i, b := range batches {
		err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error { return providersProjection{}.apply(ctx, tx, liveTables, b) })
		if err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
	}
}

// providerTotals sums provider_minute's counters of provider.
func providerTotals(t *testing.T, e *env, provider string) providerCounts {
	t.Helper()
	var c providerCounts
	err := e.pool.QueryRow(context.Background(), `SELECT `+providerCountTotals+` FROM provider_minute WHERE provider = $1`, provider).
		Scan(c.fields()...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A shadow observation meets its review's first finding in either order;
// a closed review's row waits for its shadows ShadowHorizon of the
// ledger's time, and those that never came count as missing; one that
// comes later is counted as observed, compared with nothing.
func TestProvidersShadowsInEitherOrderAndMissing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	at := func(id string, d time.Duration, data domain.Event) event {
		return event{reviewID: id, recordedAt: t0.Add(d), data: data}
	}
	submitted := func(id string) event {
		return at(id, 0, domain.Submitted{ReviewID: id, ContentClass: "video", SubmittedAt: t0, Deadline: t0.Add(30 * time.Second)})
	}
	started := func(id string) event {
		return at(id, time.Millisecond, domain.AttemptStarted{ReviewID: id, Attempt: 1, StartedAt: t0, Provider: "managed", Shadows: []string{"early", "late", "never"}})
	}
	found := func(id string, d time.Duration, state domain.Decision) event {
		return at(id, d, domain.FindingReceived{ReviewID: id, Attempt: 1, State: state, ElapsedMS: d.Milliseconds(), ReceivedAt: t0.Add(d)})
	}
	shadow := func(id, provider string, d time.Duration, state domain.Decision) event {
		return at(id, d, domain.ShadowObserved{ReviewID: id, ContentClass: "video", Provider: provider, Outcome: domain.ShadowFinding,
			State: state, StartedAt: t0, LatencyMS: d.Milliseconds()})
	}
	batches := [][]event{
		{submitted("r1"), started("r1"), shadow("r1", "early", time.Second, domain.DecisionRejected)},
		{found("r1", 2*time.Second, domain.DecisionAccepted)},
		{shadow("r1", "late", 3*time.Second, domain.DecisionAccepted)},
		// Another review's event, past r1's horizon: r1's row goes, "never" missing.
		{submitted("r2"), at("r2", 2*time.Second+ShadowHorizon+time.Millisecond, domain.AttemptStarted{ReviewID: "r2", Attempt: 1, StartedAt: t0})},
		{shadow("r1", "never", ShadowHorizon+time.Minute, domain.DecisionAccepted)},
	}
	providerBatches(t, e, batches...)
	// In one batch, the same rows: the horizon is the ledger's time of each
	// observation, not of its batch's end.
	one := newEnv(t)
	providerBatches(t, one, slices.Concat(batches...))
	diff(t, "one batch vs five", dump(t, one.pool), dump(t, e.pool))
	for _, tc := range []struct {
		provider                                string
		observed, compared, agreed, missing, ok int64
	}{
		{"early", 1, 1, 0, 0, 1},
		{"late", 1, 1, 1, 0, 1},
		// Missing when its horizon passed, observed when it came, compared with nothing.
		{"never", 1, 0, 0, 1, 0},
	} {
		c := providerTotals(t, e, tc.provider)
		if c.shadowObserved != tc.observed || c.compared != tc.compared || c.agreed != tc.agreed || c.shadowMissing != tc.missing || c.shadowWithinBudget != tc.ok {
			t.Errorf("%s: %+v, want observed %d compared %d agreed %d missing %d within budget %d",
				tc.provider, c, tc.observed, tc.compared, tc.agreed, tc.missing, tc.ok)
		}
	}
	if c := providerTotals(t, e, "managed"); c.decided != 1 || c.attempts != 1 || c.attemptWithinBudget != 1 {
		t.Errorf("managed: %+v, want one attempt deciding within budget", c)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM provider_open WHERE review_id = 'r1'`); n != 0 {
		t.Errorf("r1's provider_open row is left after its horizon")
	}
	if n := count(t, e.pool, `SELECT coalesce(sum(n), 0) FROM provider_confusion WHERE provider = 'early' AND shadow_state = 'rejected' AND decided_state = 'accepted'`); n != 1 {
		t.Errorf("early's disagreement counted %d times in provider_confusion, want once", n)
	}
}

// A review closed without a finding of its own (a moderator decided it)
// compares none of its shadows' findings, and a review whose shadows have
// all come leaves provider_open as it closes.
func TestProvidersNoFindingNoComparison(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ev := func(d time.Duration, data domain.Event) event {
		return event{reviewID: "m1", recordedAt: t0.Add(d), data: data}
	}
	providerBatches(t, e, []event{
		ev(0, domain.Submitted{ReviewID: "m1", ContentClass: "video", SubmittedAt: t0, Deadline: t0.Add(time.Minute)}),
		ev(time.Millisecond, domain.AttemptStarted{ReviewID: "m1", Attempt: 1, StartedAt: t0, Shadows: []string{"early"}}),
		ev(time.Second, domain.ShadowObserved{ReviewID: "m1", ContentClass: "video", Provider: "early", Outcome: domain.ShadowFinding,
			State: domain.DecisionAccepted, StartedAt: t0, LatencyMS: 1000}),
		ev(2*time.Second, domain.AttemptTimedOut{ReviewID: "m1", Attempt: 1, Classification: domain.ClassDeadlineExceeded, At: t0.Add(2 * time.Second)}),
		ev(3*time.Second, domain.Escalated{ReviewID: "m1", Reason: domain.ReasonAttemptsExhausted, State: domain.StateManualReview, At: t0.Add(3 * time.Second)}),
	}, []event{
		ev(time.Minute, domain.ManualDecisionRecorded{ReviewID: "m1", State: domain.DecisionRejected, Moderator: "ada", At: t0.Add(time.Minute)}),
	})
	if c := providerTotals(t, e, "early"); c.shadowObserved != 1 || c.compared != 0 || c.shadowMissing != 0 {
		t.Errorf("early: %+v, want observed once, compared never", c)
	}
	if c := providerTotals(t, e, domain.DefaultProvider); c.attempts != 1 || c.attemptTimeouts != 1 || c.decided != 0 {
		t.Errorf("default: %+v, want one timed-out attempt and nothing decided", c)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM provider_open`); n != 0 {
		t.Errorf("%d provider_open rows after the review closed with its shadows observed", n)
	}
}
