package projections

import (
	"context"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/projections/internal/workload"
)

// TestQueueRoundsHoldsAndSLA follows reviews through requeues, claims and
// holds, checks the queue each step, counts SLA breaches once, and
// compares the incremental read models with a rebuild.
func TestQueueRoundsHoldsAndSLA(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	pol := workload.DefaultPolicy() // transcript_import: manual_sla 2m; claimed_rule: claims required, manual_sla 1m
	s := scenario{t: t, e: e, pol: pol}
	sec := func(n float64) time.Time { return t0.Add(time.Duration(n * float64(time.Second))) }
	r := e.runner(t, nil)

	a := s.submit("a", "transcript_import", sec(0))
	a = s.attempt(a, sec(0))
	a = s.timeout(a, domain.ClassProviderUnavailable, sec(1))
	s.add(a)(one(a.Escalate(domain.ReasonBudgetExhausted, "", sec(60)))) // due at 180 s
	b := s.submit("b", "transcript_import", sec(1))
	b = s.attempt(b, sec(1))
	b = s.timeout(b, domain.ClassProviderUnavailable, sec(2))
	s.add(b)(one(b.Escalate(domain.ReasonBudgetExhausted, "", sec(30)))) // due at 150 s
	c := s.submit("c", "caption_suggestion", sec(2))
	c = s.attempt(c, sec(2))
	c = s.timeout(c, domain.ClassProviderUnavailable, sec(3))
	s.add(c)(one(c.Escalate(domain.ReasonBudgetExhausted, "", sec(20)))) // no manual_sla
	catchUp(t, r)

	q, err := e.db.ManualQueue(ctx, QueueQuery{Order: OrderDue, Limit: 10}, sec(100))
	if err != nil {
		t.Fatal(err)
	}
	if ids := itemIDs(q); !equal(ids, []string{"b", "a", "c"}) {
		t.Fatalf("due order %v", ids)
	}
	if due := q.Items[0].DueAt; due == nil || !due.Equal(sec(150)) || q.Items[0].SLABreached || q.Items[2].DueAt != nil || q.Items[0].Round != 1 {
		t.Fatalf("b: %+v; c: %+v", q.Items[0], q.Items[2])
	}
	if q, _ := e.db.ManualQueue(ctx, QueueQuery{Limit: 10}, sec(100)); !equal(itemIDs(q), []string{"b", "a", "c"}) {
		t.Fatalf("priority order %v", itemIDs(q))
	}
	if n, _ := e.db.CountQueue(ctx, QueueQuery{Reason: "budget_exhausted", Class: "transcript_import"}, sec(100)); n != 2 {
		t.Fatalf("count by reason and class: %d", n)
	}

	// Breaches: b's due time passed at 150 s, a's at 180 s; each counted once.
	if got, err := e.db.CountBreaches(ctx, sec(160)); err != nil || len(got) != 1 || got[0].ReviewID != "b" || got[0].Round != 1 {
		t.Fatalf("breaches at 160 s: %+v %v", got, err)
	}
	if got, _ := e.db.CountBreaches(ctx, sec(170)); len(got) != 0 {
		t.Fatalf("b counted again: %+v", got)
	}

	// Requeue a: it leaves the queue and is pending in round 2.
	a = s.load("a")
	a = s.add(a)(one(a.Requeue(domain.RequeueCommand{By: "ada", ExpectedVersion: a.Version()}, sec(170))))
	catchUp(t, r)
	if q, _ := e.db.ManualQueue(ctx, QueueQuery{Limit: 10}, sec(171)); !equal(itemIDs(q), []string{"b", "c"}) {
		t.Fatalf("after the requeue %v", itemIDs(q))
	}
	if got, _ := e.summary(t, "a"); got.State != "pending" || got.EscalationReason != nil {
		t.Fatalf("summary of a requeued review: %+v", got)
	}
	// Round 2 escalates again: a new due time, counted again once passed.
	a = s.attempt(a, sec(171))
	if at, _, _, _ := a.InFlight(); at != 2 {
		t.Fatalf("round 2's first attempt is %d", at)
	}
	a = s.timeout(a, domain.ClassProviderUnavailable, sec(172))
	s.add(a)(one(a.Escalate(domain.ReasonProviderRefused, "", sec(173))))
	catchUp(t, r)
	q, _ = e.db.ManualQueue(ctx, QueueQuery{Class: "transcript_import", Limit: 10}, sec(200))
	if len(q.Items) != 2 || q.Items[1].ReviewID != "a" || q.Items[1].Round != 2 || !q.Items[1].DueAt.Equal(sec(293)) || q.Items[1].Attempts != 2 {
		t.Fatalf("a in round 2: %+v", q.Items)
	}
	if got, _ := e.db.CountBreaches(ctx, sec(300)); len(got) != 1 || got[0].ReviewID != "a" || got[0].Round != 2 {
		t.Fatalf("breach of round 2: %+v", got)
	}

	// A class with claims: required, decided by the claim's holder; a hold
	// and its end on b.
	d := s.submit("d", "claimed_rule", sec(3))
	d = s.attempt(d, sec(3))
	d = s.timeout(d, domain.ClassProviderUnavailable, sec(4))
	d = s.add(d)(one(d.Escalate(domain.ReasonBudgetExhausted, "", sec(5))))
	d = s.add(d)(one(d.Claim("ada", time.Minute, sec(6))))
	d = s.decide(d, "ada", domain.DecisionAccepted, sec(7)) // a vote: ada's claim ends
	catchUp(t, r)
	q, _ = e.db.ManualQueue(ctx, QueueQuery{Class: "claimed_rule", Limit: 10}, sec(8))
	if len(q.Items) != 1 || q.Items[0].Claims != "required" || q.Items[0].ClaimedBy != nil || !equal(q.Items[0].Approvers, []string{"ada"}) {
		t.Fatalf("d after ada's vote: %+v", q.Items)
	}
	d = s.add(d)(one(d.Claim("bo", time.Minute, sec(9))))
	s.decide(d, "bo", domain.DecisionAccepted, sec(10))
	b = s.load("b")
	b = s.add(b)(one(b.PutOnHold(domain.HoldCommand{By: "bo", Note: "legal"}, sec(300))))
	catchUp(t, r)
	if q, _ := e.db.ManualQueue(ctx, QueueQuery{Held: HeldOnly, Limit: 10}, sec(301)); !equal(itemIDs(q), []string{"b"}) {
		t.Fatalf("held list %v", itemIDs(q))
	}
	s.add(b)(one(b.TakeOffHold("bo", sec(302))))
	catchUp(t, r)

	incremental := dump(t, e.pool)
	if _, err := r.Rebuild(ctx); err != nil {
		t.Fatal(err)
	}
	diff(t, "rebuild vs incremental", dump(t, e.pool), incremental)
	// Breaches are not projection rows: a rebuild counts none again.
	if got, _ := e.db.CountBreaches(ctx, sec(400)); len(got) != 0 {
		t.Fatalf("breaches counted again after a rebuild: %+v", got)
	}
}

func itemIDs(q Queue) []string {
	ids := []string{}
	for _, it := range q.Items {
		ids = append(ids, it.ReviewID)
	}
	return ids
}
