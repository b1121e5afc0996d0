package projections

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/projections/internal/workload"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// scenario writes a few reviews with known times through the domain
// commands.
type scenario struct {
	t   *testing.T
	e   *env
	pol domain.Policy
}

func (s scenario) submit(id, class string, at time.Time) *ledger.Snapshot {
	s.t.Helper()
	sub, err := domain.Submit(domain.SubmitCommand{ReviewID: id, ContentClass: class, ContentType: "text/plain",
		PayloadDigest: "sha256:00", Policy: s.pol.Classes[class], Now: at})
	if err != nil {
		s.t.Fatal(err)
	}
	rv, err := s.e.ledger.Create(context.Background(), sub, ledger.Actor{Name: "test"})
	if err != nil {
		s.t.Fatal(err)
	}
	return rv
}

// add returns a function appending the events a command returned to rv.
func (s scenario) add(rv *ledger.Snapshot) func([]domain.Event, error) *ledger.Snapshot {
	return func(events []domain.Event, err error) *ledger.Snapshot {
		s.t.Helper()
		if err != nil {
			s.t.Fatal(err)
		}
		next, err := s.e.ledger.Append(context.Background(), rv, ledger.Actor{Name: "test"}, events...)
		if err != nil {
			s.t.Fatal(err)
		}
		return next
	}
}

func one[E domain.Event](e E, err error) ([]domain.Event, error) { return []domain.Event{e}, err }

func (s scenario) attempt(rv *ledger.Snapshot, at time.Time) *ledger.Snapshot {
	return s.add(rv)(one(rv.StartAttempt(at)))
}

func (s scenario) find(rv *ledger.Snapshot, state domain.Decision, at time.Time) *ledger.Snapshot {
	attempt, _, _, _ := rv.InFlight()
	evs, err := rv.RecordFinding(domain.Finding{ReviewID: rv.ID(), Attempt: attempt, State: state, Reasons: []string{"r"}}, domain.SourceResponse, at)
	return s.add(rv)(evs, err)
}

func (s scenario) timeout(rv *ledger.Snapshot, class domain.Classification, at time.Time) *ledger.Snapshot {
	attempt, _, _, _ := rv.InFlight()
	return s.add(rv)(one(rv.TimeOutAttempt(domain.AttemptFailure{Attempt: attempt, Classification: class}, at)))
}

// load reads a review's current snapshot.
func (s scenario) load(id string) *ledger.Snapshot {
	s.t.Helper()
	rv, err := s.e.ledger.Load(context.Background(), id)
	if err != nil {
		s.t.Fatal(err)
	}
	return rv
}

func catchUp(t *testing.T, r *Runner) {
	t.Helper()
	if err := r.CatchUp(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func (s scenario) decide(rv *ledger.Snapshot, moderator string, state domain.Decision, at time.Time) *ledger.Snapshot {
	return s.add(rv)(rv.DecideManually(domain.ManualDecision{Moderator: moderator, State: state, ExpectedVersion: rv.Version()}, at))
}

func TestQueries(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	s := scenario{t: t, e: e, pol: workload.DefaultPolicy()}
	sec := func(n float64) time.Time { return t0.Add(time.Duration(n * float64(time.Second))) }

	// caption_suggestion (priority 1), transcript_import (2), publishing_rule
	// (3, human gate, two approvals, fail closed).
	a := s.submit("a", "caption_suggestion", sec(0))
	a = s.attempt(a, sec(0))
	a = s.find(a, domain.DecisionRejected, sec(2)) // completed in 2 s

	b := s.submit("b", "transcript_import", sec(1))
	b = s.attempt(b, sec(1))
	b = s.timeout(b, domain.ClassDeadlineExceeded, sec(21))
	s.add(b)(one(b.Escalate(domain.ReasonRetryBudgetExhausted, "", sec(22)))) // queued at 22 s

	c := s.submit("c", "publishing_rule", sec(2))
	c = s.attempt(c, sec(2))
	c = s.find(c, domain.DecisionAccepted, sec(6)) // human gate: queued at 6 s
	c = s.decide(c, "ada", domain.DecisionAccepted, sec(30))

	d := s.submit("d", "caption_suggestion", sec(3))
	d = s.attempt(d, sec(3))
	d = s.timeout(d, domain.ClassTransportError, sec(4))
	s.add(d)(one(d.Escalate(domain.ReasonProviderRefused, "", sec(5)))) // queued at 5 s

	f := s.submit("f", "publishing_rule", sec(4))
	f = s.attempt(f, sec(4))
	f = s.timeout(f, domain.ClassDeadlineExceeded, sec(14))
	s.add(f)(one(f.Escalate(domain.ReasonAttemptsExhausted, "", sec(15)))) // fail closed: rejected

	s.submit("g", "transcript_import", sec(5)) // pending, deadline 65 s
	g2 := s.submit("h", "caption_suggestion", sec(6))
	s.attempt(g2, sec(6)) // pending, deadline 36 s

	// A duplicate finding for a, refused after its decision.
	late, err := a.RecordConflict(domain.Conflict{Attempt: 1, Source: domain.SourceCallback, Reason: domain.ConflictReviewMovedOn}, sec(3))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.ledger.RecordConflict(ctx, late, ledger.Actor{Name: "provider"}); err != nil {
		t.Fatal(err)
	}
	r := e.runner(t, nil)
	if err := r.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	now := sec(100)

	t.Run("review", func(t *testing.T) {
		got, ok := e.summary(t, "c")
		if !ok || got.State != "manual_review" || got.Attempts != 1 || got.Version != 4 || got.DecidedAt != nil || *got.EscalationReason != "human_gate" {
			t.Fatalf("c: %+v", got)
		}
		got, _ = e.summary(t, "f")
		if got.State != "rejected" || *got.DecidedBy != "policy" || len(got.Reasons) != 1 || got.Reasons[0] != "fail_closed:attempts_exhausted" {
			t.Fatalf("f: %+v", got)
		}
		if _, ok := e.summary(t, "nope"); ok {
			t.Fatal("a row for an unknown review")
		}
		for _, id := range []string{"g", "h"} {
			if got, _ := e.summary(t, id); got.State != "pending" {
				t.Fatalf("%s: %+v, want pending", id, got)
			}
		}
	})

	t.Run("manual queue", func(t *testing.T) {
		q, err := e.db.ManualQueue(ctx, QueueQuery{Limit: 100}, now)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, it := range q.Items {
			ids = append(ids, it.ReviewID)
		}
		if want := []string{"c", "b", "d"}; !equal(ids, want) {
			t.Fatalf("order %v, want %v", ids, want)
		}
		c := q.Items[0]
		if c.Priority != 3 || c.Reason != "human_gate" || c.AgeSeconds != 94 || c.RequiredApprovals != 2 || !equal(c.Approvers, []string{"ada"}) || c.Version != 4 {
			t.Fatalf("c: %+v", c)
		}
		q, _ = e.db.ManualQueue(ctx, QueueQuery{Class: "caption_suggestion", Limit: 1}, now)
		if len(q.Items) != 1 || q.Items[0].ReviewID != "d" {
			t.Fatalf("class filter: %+v", q.Items)
		}
		if _, err := e.db.ManualQueue(ctx, QueueQuery{Limit: MaxLimit + 1}, now); !errors.Is(err, ErrInvalidQuery) {
			t.Fatalf("limit over max: %v", err)
		}
		body, _ := json.Marshal(q)
		var shape struct {
			Items []map[string]any `json:"items"`
		}
		_ = json.Unmarshal(body, &shape)
		for _, k := range []string{"review_id", "content_class", "reason", "attempts", "escalated_at", "age_seconds", "claimed_by", "claim_expires_at"} {
			if _, ok := shape.Items[0][k]; !ok {
				t.Errorf("queue item JSON lacks %q: %s", k, body)
			}
		}
	})

	t.Run("claims and holds", func(t *testing.T) {
		lease := time.Minute
		b := s.load("b")
		b = s.add(b)(one(b.Claim("ada", lease, now)))
		b = s.add(b)(one(b.Claim("ada", lease, now.Add(30*time.Second)))) // renewed
		catchUp(t, r)
		q, _ := e.db.ManualQueue(ctx, QueueQuery{Class: "transcript_import", Limit: 10}, now.Add(time.Minute))
		if it := q.Items[0]; it.ClaimedBy == nil || *it.ClaimedBy != "ada" || !it.ClaimExpiresAt.Equal(now.Add(90*time.Second)) || it.Version != b.Version() {
			t.Fatalf("queue shows %+v", it)
		}
		if n, _ := e.db.CountQueue(ctx, QueueQuery{ClaimedBy: "ada"}, now.Add(time.Minute)); n != 1 {
			t.Fatalf("items claimed by ada: %d", n)
		}
		// Once the lease has expired the claim is not shown, and the sweep
		// finds it.
		later := now.Add(2 * time.Minute)
		q, _ = e.db.ManualQueue(ctx, QueueQuery{Class: "transcript_import", Limit: 10}, later)
		if it := q.Items[0]; it.ClaimedBy != nil || it.ClaimExpiresAt != nil {
			t.Fatalf("expired claim shown: %+v", it)
		}
		if ids, err := e.db.ExpiredClaims(ctx, later, 10); err != nil || !equal(ids, []string{"b"}) {
			t.Fatalf("expired claims: %v %v", ids, err)
		}
		rel, ok := b.ExpireClaim(later)
		if !ok {
			t.Fatal("no expiry")
		}
		b = s.add(b)(one(rel, nil))
		// A hold moves the item from the unheld list to the held one.
		b = s.add(b)(one(b.PutOnHold(domain.HoldCommand{By: "bo", Note: "legal"}, later)))
		catchUp(t, r)
		if ids, _ := e.db.ExpiredClaims(ctx, later, 10); len(ids) != 0 {
			t.Fatalf("released claim still found: %v", ids)
		}
		if q, _ := e.db.ManualQueue(ctx, QueueQuery{Class: "transcript_import", Held: HeldExcluded, Limit: 10}, later); len(q.Items) != 0 {
			t.Fatalf("held item listed among the unheld: %+v", q.Items)
		}
		if q, _ := e.db.ManualQueue(ctx, QueueQuery{Class: "transcript_import", Limit: 10}, later); len(q.Items) != 1 || !q.Items[0].Held {
			t.Fatalf("the default list is every item, held ones marked: %+v", q.Items)
		}
		q, _ = e.db.ManualQueue(ctx, QueueQuery{Held: HeldOnly, Limit: 10}, later)
		if len(q.Items) != 1 || !q.Items[0].Held || *q.Items[0].HeldBy != "bo" || *q.Items[0].HoldNote != "legal" || !q.Items[0].HeldAt.Equal(later) {
			t.Fatalf("held list: %+v", q.Items)
		}
		if q, _ := e.db.ManualQueue(ctx, QueueQuery{Held: HeldAny, Limit: 10}, later); len(q.Items) != 3 {
			t.Fatalf("held=any: %d items", len(q.Items))
		}
		b = s.add(b)(one(b.TakeOffHold("bo", later)))
		catchUp(t, r)
		q, _ = e.db.ManualQueue(ctx, QueueQuery{Class: "transcript_import", Limit: 10}, later)
		if len(q.Items) != 1 || q.Items[0].Held || q.Items[0].HeldBy != nil || q.Items[0].Version != b.Version() {
			t.Fatalf("after unhold: %+v", q.Items)
		}
		if _, err := e.db.ManualQueue(ctx, QueueQuery{Held: "maybe", Limit: 1}, later); !errors.Is(err, ErrInvalidQuery) {
			t.Fatalf("bad held: %v", err)
		}
		if _, err := e.db.ManualQueue(ctx, QueueQuery{Order: "random", Limit: 1}, later); !errors.Is(err, ErrInvalidQuery) {
			t.Fatalf("bad order: %v", err)
		}
	})

	t.Run("slo", func(t *testing.T) {
		got, err := e.db.SLO(ctx, time.Hour, "", now)
		if err != nil {
			t.Fatal(err)
		}
		// a (finding at 2 s) and c (finding at 4 s after submission) are
		// complete within budget; b, c, d, f escalated; latencies 2, 21, 4,
		// 2, 11 s.
		if got.Total != 7 || got.CompletedWithinBudget != 2 || got.Escalated != 4 || got.ConflictingCompletions != 1 {
			t.Fatalf("got %+v", got)
		}
		if math.Abs(got.WithinBudgetRatio-2.0/7) > 1e-9 {
			t.Errorf("ratio %v", got.WithinBudgetRatio)
		}
		within := func(est, want float64) bool { return math.Abs(est-want)/want <= 0.0906 }
		if !within(got.LatencyMS.P50, 4000) || !within(got.LatencyMS.P90, 21000) || !within(got.LatencyMS.P99, 21000) {
			t.Errorf("latency %+v, want about 4000/21000/21000", got.LatencyMS)
		}
		if got.ManualQueue.Depth != 3 || got.ManualQueue.OldestAgeSeconds != 95 {
			t.Errorf("queue %+v, want depth 3, oldest 95 s (d)", got.ManualQueue)
		}
		cap, _ := e.db.SLO(ctx, time.Hour, "caption_suggestion", now)
		if cap.Total != 3 || cap.CompletedWithinBudget != 1 || cap.ConflictingCompletions != 1 || cap.ManualQueue.Depth != 1 {
			t.Errorf("caption_suggestion: %+v", cap)
		}
		old, _ := e.db.SLO(ctx, time.Hour, "", t0.Add(3*time.Hour))
		if old.Total != 0 || old.LatencyMS.P50 != 0 {
			t.Errorf("a window without submissions: %+v", old)
		}
		if _, err := e.db.SLO(ctx, 0, "", now); !errors.Is(err, ErrInvalidQuery) {
			t.Errorf("zero window: %v", err)
		}
		body, _ := json.Marshal(got)
		var shape map[string]any
		_ = json.Unmarshal(body, &shape)
		for _, k := range []string{"total", "completed_within_budget", "within_budget_ratio", "escalated", "conflicting_completions", "latency_ms", "manual_queue"} {
			if _, ok := shape[k]; !ok {
				t.Errorf("SLO JSON lacks %q: %s", k, body)
			}
		}
	})

	t.Run("attempt service times", func(t *testing.T) {
		got, err := e.db.AttemptServiceTimes(ctx, "", time.Hour, now)
		if err != nil {
			t.Fatal(err)
		}
		by := map[string]ServiceTimes{}
		for _, st := range got {
			by[st.ContentClass] = st
		}
		pr := by["publishing_rule"] // c: finding after 4 s; f: timed out after 10 s
		if pr.Attempts != 2 || pr.Findings != 1 || pr.Timeouts != 1 || pr.TimeoutRate != 0.5 || math.Abs(pr.FindingMS.P50-4000)/4000 > 0.0906 {
			t.Errorf("publishing_rule: %+v", pr)
		}
		cs := by["caption_suggestion"] // a: finding after 2 s; d: transport error after 1 s
		if cs.Attempts != 2 || cs.Findings != 1 || cs.Failures != 1 || cs.Timeouts != 0 {
			t.Errorf("caption_suggestion: %+v", cs)
		}
		only, _ := e.db.AttemptServiceTimes(ctx, "transcript_import", time.Hour, now)
		if len(only) != 1 || only[0].Timeouts != 1 {
			t.Errorf("transcript_import: %+v", only)
		}
	})

	t.Run("decided leaves the queue", func(t *testing.T) {
		s.decide(c, "bo", domain.DecisionAccepted, sec(40))
		if err := r.CatchUp(ctx); err != nil {
			t.Fatal(err)
		}
		q, _ := e.db.ManualQueue(ctx, QueueQuery{Class: "publishing_rule", Limit: 10}, now)
		if len(q.Items) != 0 {
			t.Fatalf("decided review still queued: %+v", q.Items)
		}
		sum, _ := e.summary(t, "c")
		if sum.State != "accepted" || *sum.DecidedBy != "bo" {
			t.Fatalf("c: %+v", sum)
		}
		got, _ := e.db.SLO(ctx, time.Hour, "publishing_rule", now)
		if got.CompletedWithinBudget != 1 { // the finding counted; the decision (after the deadline) adds nothing
			t.Fatalf("publishing_rule: %+v", got)
		}
	})
}

func workloadConfig(reviews int, seed uint64) workload.Config {
	return workload.Config{Reviews: reviews, Writers: 2, Seed: seed}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestHistogramBuckets(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		ms   float64
		want int
	}{{0, 0}, {1, 0}, {1.01, 1}, {math.Pow(2, 0.25), 1}, {1.2, 2}, {2, 4}, {2.01, 5}, {1024, 40}, {1e12, numBuckets - 1}} {
		if got := bucketOf(c.ms); got != c.want {
			t.Errorf("bucketOf(%v) = %d, want %d", c.ms, got, c.want)
		}
	}
	// Every value within the range is estimated within 2^(1/8)-1.
	bound := math.Pow(2, 1.0/8) - 1
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		v := math.Exp2(rng.Float64() * float64(numBuckets-2) / bucketsPerDoubling)
		est := estimate(bucketOf(v))
		if rel := math.Abs(est-v) / v; rel > bound+1e-12 {
			t.Fatalf("value %v estimated %v: relative error %v over %v", v, est, rel, bound)
		}
	}
}

func TestHistogramQuantile(t *testing.T) {
	t.Parallel()
	var h histogram
	if h.quantile(0.5) != 0 {
		t.Fatal("empty histogram")
	}
	// 1..1000 ms: the true p50, p90, p99 are 500, 900, 990.
	for v := 1; v <= 1000; v++ {
		h[bucketOf(float64(v))]++
	}
	for q, want := range map[float64]float64{0.5: 500, 0.9: 900, 0.99: 990} {
		if got := h.quantile(q); math.Abs(got-want)/want > 0.0906 {
			t.Errorf("p%v = %v, want %v within 9.06%%", q*100, got, want)
		}
	}
}

// review_summary holds what the aggregate says after the same events.
func TestSummaryMatchesAggregate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	st := e.workload(t, workloadConfig(150, 37))
	if err := e.runner(t, nil).CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	queue, err := e.db.ManualQueue(ctx, QueueQuery{Limit: MaxLimit}, t0)
	if err != nil {
		t.Fatal(err)
	}
	queued := map[string]QueueItem{}
	withApprovals := 0
	for _, it := range queue.Items {
		queued[it.ReviewID] = it
		if len(it.Approvers) > 0 {
			withApprovals++
		}
	}
	if withApprovals == 0 {
		t.Error("no queued review has an approval: the workload does not exercise four-eyes classes")
	}
	if len(queued) != int(st.States[domain.StateManualReview]) {
		t.Errorf("%d queued, want the %d reviews in manual_review", len(queued), st.States[domain.StateManualReview])
	}
	for i := range int(st.Reviews) {
		id := fmt.Sprint(i)
		rv, err := e.ledger.Load(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := e.summary(t, id)
		if !ok {
			t.Fatalf("review %s: no review_summary row", id)
		}
		// PostgreSQL keeps microseconds.
		us := func(t time.Time) time.Time { return t.Truncate(time.Microsecond) }
		want := Summary{
			ReviewID: id, State: string(rv.State()), ContentClass: rv.Class(), Attempts: rv.Attempts(), Version: rv.Version(),
			SubmittedAt: us(rv.SubmittedAt()), Deadline: us(rv.Deadline()), Reasons: nonNil(rv.Reasons()),
		}
		if !rv.DecidedAt().IsZero() {
			want.DecidedAt, want.DecidedBy = ptr(us(rv.DecidedAt())), ptr(rv.DecidedBy())
		}
		if rv.EscalationReason() != "" {
			want.EscalationReason, want.EscalatedAt = ptr(string(rv.EscalationReason())), ptr(us(rv.EscalatedAt()))
		}
		got.UpdatedAt = time.Time{}
		if g, w := summaryText(got), summaryText(want); g != w {
			t.Errorf("review %s:\n got %s\nwant %s", id, g, w)
		}
		if rv.State() != domain.StateManualReview {
			continue
		}
		it, ok := queued[id]
		var approvers []string
		for _, names := range rv.Approvals() {
			approvers = append(approvers, names...)
		}
		if !ok || it.Priority != rv.Policy().Priority || it.RequiredApprovals != rv.Policy().RequiredApprovals() ||
			it.Version != rv.Version() || it.Reason != string(rv.EscalationReason()) || it.Attempts != rv.Attempts() ||
			!it.EscalatedAt.Equal(rv.EscalatedAt().Truncate(time.Microsecond)) || len(it.Approvers) != len(approvers) {
			t.Errorf("review %s: queued %v as %+v; aggregate: priority %d, version %d, reason %s, approvers %v",
				id, ok, it, rv.Policy().Priority, rv.Version(), rv.EscalationReason(), approvers)
		}
	}
}

func summaryText(s Summary) string {
	b, _ := json.Marshal(s)
	return string(b)
}
