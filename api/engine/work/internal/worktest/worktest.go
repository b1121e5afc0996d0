// Package worktest is the conformance suite every work.Store adapter runs:
//
//	func TestConformance(t *testing.T) {
//		worktest.Run(t, func(t *testing.T) worktest.Subject {
//			return ... // an empty store, its ledger, released in t.Cleanup
//		})
//	}
//
// It tests only what the work.Store doc comments promise.
package worktest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/api/engine/work"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

// Subject is a store under test and the ledger that commits through it.
type Subject struct {
	Store  work.Store
	Ledger *ledger.Ledger
}

// Run runs the whole suite against subjects made by newSubject.
func Run(t *testing.T, newSubject func(t *testing.T) Subject) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s Subject)
	}{
		{"CreateWithTheStream", testCreate},
		{"ClaimTakesDueUnheldRecords", testClaim},
		{"ClaimByIDs", testClaimIDs},
		{"ClaimPastDeadline", testClaimDeadline},
		{"RacingClaimsTakeEachRecordOnce", testRacingClaims},
		{"RenewAndRelease", testRenewRelease},
		{"ParkAndReleaseWithAppends", testParkRelease},
		{"ReopenWithARequeue", testReopen},
		{"ChangeOnlyWhenWritten", testChangeOnlyWhenWritten},
		{"EnsureDoneCount", testEnsure},
		{"Payloads", testPayloads},
		{"Deliveries", testDeliveries},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newSubject(t))
		})
	}
}

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func policy() domain.ClassPolicy {
	return domain.ClassPolicy{Budget: 10 * time.Second, AttemptTimeout: 2 * time.Second, MaxAttempts: 3,
		Backoff: domain.Backoff{Initial: 100 * time.Millisecond, Max: time.Second}, OnExhaustion: domain.ExhaustToManualReview}
}

// create submits id at t0 with its record (owned by owner when not "")
// and returns its snapshot.
func create(t *testing.T, s Subject, id, owner string) *ledger.Snapshot {
	t.Helper()
	content := []byte("content of " + id)
	ev, err := domain.Submit(domain.SubmitCommand{ReviewID: id, ContentClass: "c", ContentType: "text/plain",
		PayloadDigest: digest(content), PayloadBytes: len(content), Policy: policy(), Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	change := work.Change{Op: work.Create, ReviewID: id, Deadline: ev.Deadline, At: t0,
		Payload: work.Payload{Digest: digest(content), ContentType: "text/plain", Content: content}}
	if owner != "" {
		if !s.Store.Atomic() {
			t.Fatal("create with an owner on a store that is not atomic")
		}
		change.Owner, change.LeaseUntil = owner, t0.Add(time.Second)
	}
	snap, err := s.Ledger.CreateWith(context.Background(), ev, ledger.Actor{Name: "test"}, change)
	if err != nil {
		t.Fatalf("create %s: %v", id, err)
	}
	return snap
}

func digest(b []byte) string { return fmt.Sprintf("sha256:%x", b) }

func claim(t *testing.T, s Subject, q work.Query) []string {
	t.Helper()
	got, err := s.Store.Claim(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(got))
	for i, c := range got {
		ids[i] = c.ReviewID
		if c.Owner != q.Owner || !c.LeaseUntil.Equal(q.LeaseUntil) {
			t.Errorf("claimed %s: owner %q until %s, want %q until %s", c.ReviewID, c.Owner, c.LeaseUntil, q.Owner, q.LeaseUntil)
		}
	}
	return ids
}

func testCreate(t *testing.T, s Subject) {
	snap := create(t, s, "cr-1", "")
	got, err := s.Store.Claim(context.Background(), work.Query{Owner: "p", LeaseUntil: t0.Add(time.Second), Now: t0})
	if err != nil || len(got) != 1 {
		t.Fatalf("claim = %v, %v", got, err)
	}
	c := got[0]
	if c.ReviewID != "cr-1" || !c.Deadline.Equal(snap.Deadline()) || !c.DueAt.Equal(t0) || c.Awaiting != 0 {
		t.Errorf("record %+v", c.Record)
	}
	if c.Payload == nil || string(c.Payload.Content) != "content of cr-1" || c.Payload.Digest != snap.PayloadDigest() {
		t.Errorf("claimed payload %+v", c.Payload)
	}
	if n, err := s.Store.Count(context.Background()); err != nil || n != 1 {
		t.Errorf("Count = %d, %v", n, err)
	}
	if s.Store.Atomic() {
		create(t, s, "cr-owned", "owner-a")
		if ids := claim(t, s, work.Query{Owner: "p", LeaseUntil: t0.Add(time.Hour), Now: t0.Add(500 * time.Millisecond)}); len(ids) != 0 {
			t.Errorf("a record created held by a live lease was claimed: %v", ids)
		}
		if ids := claim(t, s, work.Query{Owner: "p", LeaseUntil: t0.Add(time.Hour), Now: t0.Add(2 * time.Second), IDs: []string{"cr-owned"}}); !slices.Equal(ids, []string{"cr-owned"}) {
			t.Errorf("claim after the creator's lease = %v", ids)
		}
	}
}

func testClaim(t *testing.T, s Subject) {
	for _, id := range []string{"cl-1", "cl-2", "cl-3"} {
		create(t, s, id, "")
	}
	ctx := context.Background()
	// cl-3 parked until +5s.
	if got := claim(t, s, work.Query{Owner: "a", LeaseUntil: t0.Add(time.Second), Now: t0, IDs: []string{"cl-3"}}); len(got) != 1 {
		t.Fatal("claim cl-3")
	}
	if err := s.Store.Park(ctx, "a", "cl-3", t0.Add(5*time.Second), 1); err != nil {
		t.Fatal(err)
	}
	first := claim(t, s, work.Query{Owner: "a", LeaseUntil: t0.Add(time.Second), Now: t0, Limit: 1})
	if len(first) != 1 {
		t.Fatalf("limit 1 took %v", first)
	}
	rest := claim(t, s, work.Query{Owner: "b", LeaseUntil: t0.Add(time.Second), Now: t0})
	if len(rest) != 1 || rest[0] == first[0] || rest[0] == "cl-3" {
		t.Fatalf("second claim took %v after %v", rest, first)
	}
	if got := claim(t, s, work.Query{Owner: "c", LeaseUntil: t0.Add(time.Hour), Now: t0.Add(500 * time.Millisecond)}); len(got) != 0 {
		t.Fatalf("live leases and a parked record were taken: %v", got)
	}
	// Leases end at +1s; cl-3 is due at +5s.
	got := claim(t, s, work.Query{Owner: "c", LeaseUntil: t0.Add(time.Hour), Now: t0.Add(2 * time.Second)})
	sort.Strings(got)
	if !slices.Equal(got, []string{"cl-1", "cl-2"}) {
		t.Fatalf("after the leases ended: %v", got)
	}
	parked, err := s.Store.Claim(ctx, work.Query{Owner: "d", LeaseUntil: t0.Add(time.Hour), Now: t0.Add(5 * time.Second)})
	if err != nil || len(parked) != 1 || parked[0].ReviewID != "cl-3" || parked[0].Awaiting != 1 || !parked[0].DueAt.Equal(t0.Add(5*time.Second)) {
		t.Fatalf("the parked record when due: %+v, %v", parked, err)
	}
}

func testClaimIDs(t *testing.T, s Subject) {
	for _, id := range []string{"id-1", "id-2"} {
		create(t, s, id, "")
	}
	got := claim(t, s, work.Query{Owner: "a", LeaseUntil: t0.Add(time.Second), Now: t0, IDs: []string{"id-2", "nope"}})
	if !slices.Equal(got, []string{"id-2"}) {
		t.Fatalf("claim by IDs = %v", got)
	}
	if got := claim(t, s, work.Query{Owner: "b", LeaseUntil: t0.Add(time.Second), Now: t0, IDs: []string{"id-2"}}); len(got) != 0 {
		t.Fatalf("a held record taken by ID: %v", got)
	}
}

func testClaimDeadline(t *testing.T, s Subject) {
	create(t, s, "dl-1", "")
	ctx := context.Background()
	claim(t, s, work.Query{Owner: "a", LeaseUntil: t0.Add(time.Second), Now: t0})
	if err := s.Store.Park(ctx, "a", "dl-1", t0.Add(time.Hour), 0); err != nil {
		t.Fatal(err)
	}
	// Deadline +10s: not before +5s; before +11s, due or not.
	if got := claim(t, s, work.Query{Owner: "s", LeaseUntil: t0.Add(time.Minute), Now: t0.Add(5 * time.Second), DeadlineBefore: t0.Add(5 * time.Second)}); len(got) != 0 {
		t.Fatalf("swept before the deadline: %v", got)
	}
	if got := claim(t, s, work.Query{Owner: "s", LeaseUntil: t0.Add(time.Minute), Now: t0.Add(11 * time.Second), DeadlineBefore: t0.Add(11 * time.Second)}); !slices.Equal(got, []string{"dl-1"}) {
		t.Fatalf("sweep past the deadline = %v", got)
	}
}

func testRacingClaims(t *testing.T, s Subject) {
	const n = 40
	for i := range n {
		create(t, s, fmt.Sprintf("race-%02d", i), "")
	}
	var (
		mu    sync.Mutex
		taken = map[string]string{}
		wg    sync.WaitGroup
	)
	for w := range 4 {
		owner := fmt.Sprintf("w%d", w)
		wg.Go(func() {
			for range 20 {
				got, err := s.Store.Claim(context.Background(), work.Query{Owner: owner, LeaseUntil: t0.Add(time.Hour), Now: t0, Limit: 3})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, c := range got {
					if other, ok := taken[c.ReviewID]; ok {
						t.Errorf("%s taken by %s and %s", c.ReviewID, other, owner)
					}
					taken[c.ReviewID] = owner
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(taken) != n {
		t.Errorf("%d of %d records taken", len(taken), n)
	}
}

func testRenewRelease(t *testing.T, s Subject) {
	ctx := context.Background()
	for _, id := range []string{"rn-1", "rn-2", "rn-3"} {
		create(t, s, id, "")
	}
	claim(t, s, work.Query{Owner: "a", LeaseUntil: t0.Add(time.Second), Now: t0, IDs: []string{"rn-1", "rn-2"}})
	renewed, held, err := s.Store.Renew(ctx, "a", []string{"rn-1", "rn-2", "rn-3"}, t0.Add(time.Minute))
	sort.Strings(renewed)
	sort.Strings(held)
	if err != nil || !slices.Equal(held, []string{"rn-1", "rn-2"}) || !slices.Equal(renewed, held) {
		t.Fatalf("Renew = %v, %v, %v; want the two a holds, renewed", renewed, held, err)
	}
	if got := claim(t, s, work.Query{Owner: "b", LeaseUntil: t0.Add(time.Hour), Now: t0.Add(30 * time.Second), IDs: []string{"rn-1", "rn-2"}}); len(got) != 0 {
		t.Fatalf("renewed leases taken: %v", got)
	}
	if err := s.Store.Release(ctx, "a", []string{"rn-1"}, t0.Add(30*time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := claim(t, s, work.Query{Owner: "b", LeaseUntil: t0.Add(time.Hour), Now: t0.Add(30 * time.Second), IDs: []string{"rn-1", "rn-2"}}); !slices.Equal(got, []string{"rn-1"}) {
		t.Fatalf("after releasing rn-1: %v", got)
	}
	if err := s.Store.Release(ctx, "a", nil, t0.Add(30*time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := claim(t, s, work.Query{Owner: "b", LeaseUntil: t0.Add(time.Hour), Now: t0.Add(30 * time.Second), IDs: []string{"rn-2"}}); !slices.Equal(got, []string{"rn-2"}) {
		t.Fatalf("after releasing all of a's: %v", got)
	}
	if _, held, _ := s.Store.Renew(ctx, "a", []string{"rn-1", "rn-2"}, t0.Add(time.Hour)); len(held) != 0 {
		t.Fatalf("a still renews %v after others took them", held)
	}
}

// append writes events to snap with a change, through the ledger.
func appendWith(t *testing.T, s Subject, snap *ledger.Snapshot, change work.Change, events ...domain.Event) *ledger.Snapshot {
	t.Helper()
	next, err := s.Ledger.Write(context.Background(), snap, ledger.Actor{Name: "test"}, ledger.Step{Events: events, Work: &change})
	if err != nil {
		t.Fatal(err)
	}
	return next
}

func testParkRelease(t *testing.T, s Subject) {
	snap := create(t, s, "pk-1", "")
	claim(t, s, work.Query{Owner: "a", LeaseUntil: t0.Add(time.Second), Now: t0})
	st, _ := snap.StartAttempt(t0)
	snap = appendWith(t, s, snap, work.Change{Op: work.Keep, ReviewID: "pk-1", Owner: "a"}, st)
	to, _ := snap.TimeOutAttempt(domain.AttemptFailure{Attempt: 1, Classification: domain.ClassTransportError}, t0.Add(time.Second))
	snap = appendWith(t, s, snap, work.Change{Op: work.Park, ReviewID: "pk-1", Owner: "a", Until: t0.Add(3 * time.Second)}, to)
	if got := claim(t, s, work.Query{Owner: "b", LeaseUntil: t0.Add(time.Hour), Now: t0.Add(2 * time.Second)}); len(got) != 0 {
		t.Fatalf("parked record taken before it was due: %v", got)
	}
	if got := claim(t, s, work.Query{Owner: "b", LeaseUntil: t0.Add(time.Hour), Now: t0.Add(3 * time.Second)}); !slices.Equal(got, []string{"pk-1"}) {
		t.Fatalf("parked record when due: %v", got)
	}
	// A park by an owner that no longer holds it changes nothing.
	st, _ = snap.StartAttempt(t0.Add(3 * time.Second))
	snap = appendWith(t, s, snap, work.Change{Op: work.Park, ReviewID: "pk-1", Owner: "a", Until: t0.Add(time.Hour)}, st)
	if _, held, _ := s.Store.Renew(context.Background(), "b", []string{"pk-1"}, t0.Add(time.Hour)); !slices.Equal(held, []string{"pk-1"}) {
		t.Fatalf("another owner's park took b's lease: %v", held)
	}
	f, err := snap.RecordFinding(domain.Finding{ReviewID: "pk-1", Attempt: 2, State: domain.DecisionAccepted}, domain.SourceResponse, t0.Add(4*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	appendWith(t, s, snap, work.Change{Op: work.Release, ReviewID: "pk-1"}, f...)
	if n, _ := s.Store.Count(context.Background()); n != 0 {
		t.Fatalf("%d records after the release", n)
	}
}

// A requeued review's record is written again with the Requeued event: due
// at its time, the round's deadline, no owner; the content stays.
func testReopen(t *testing.T, s Subject) {
	ctx := context.Background()
	snap := create(t, s, "rq-1", "")
	claim(t, s, work.Query{Owner: "a", LeaseUntil: t0.Add(time.Second), Now: t0})
	st, _ := snap.StartAttempt(t0)
	snap = appendWith(t, s, snap, work.Change{Op: work.Keep, ReviewID: "rq-1", Owner: "a"}, st)
	to, _ := snap.TimeOutAttempt(domain.AttemptFailure{Attempt: 1, Classification: domain.ClassProviderUnavailable}, t0.Add(time.Second))
	esc, _ := snap.Escalate(domain.ReasonProviderRefused, "", t0.Add(time.Second))
	snap = appendWith(t, s, snap, work.Change{Op: work.Release, ReviewID: "rq-1"}, to, esc)
	if n, _ := s.Store.Count(ctx); n != 0 {
		t.Fatalf("%d records in manual_review", n)
	}
	at := t0.Add(time.Hour)
	rq, err := snap.Requeue(domain.RequeueCommand{By: "mona", ExpectedVersion: snap.Version()}, at)
	if err != nil {
		t.Fatal(err)
	}
	appendWith(t, s, snap, work.Change{Op: work.Reopen, ReviewID: "rq-1", Deadline: rq.Deadline, At: at}, rq)
	if got := claim(t, s, work.Query{Owner: "b", LeaseUntil: at.Add(time.Minute), Now: at.Add(-time.Second)}); len(got) != 0 {
		t.Fatalf("reopened record taken before it was due: %v", got)
	}
	got, err := s.Store.Claim(ctx, work.Query{Owner: "b", LeaseUntil: at.Add(time.Minute), Now: at})
	if err != nil || len(got) != 1 || got[0].ReviewID != "rq-1" || !got[0].Deadline.Equal(rq.Deadline) || got[0].Payload == nil {
		t.Fatalf("reopened record: %+v %v", got, err)
	}
}

// A change is applied if and only if its append is written: a stream that
// fails its check in a batch leaves its record alone, while the others'
// changes apply.
func testChangeOnlyWhenWritten(t *testing.T, s Subject) {
	ctx := context.Background()
	a := create(t, s, "ow-a", "")
	b := create(t, s, "ow-b", "")
	claim(t, s, work.Query{Owner: "p", LeaseUntil: t0.Add(time.Second), Now: t0})
	// b moves on behind the engine's back: its stale snapshot fails.
	sb, _ := b.StartAttempt(t0)
	if _, err := s.Ledger.Append(ctx, b, ledger.Actor{Name: "other"}, sb); err != nil {
		t.Fatal(err)
	}
	// Both in one batch: a first batch is held while they queue behind it.
	plug := create(t, s, "ow-plug", "")
	batches := &heldFirst{Committer: s.Store, held: make(chan struct{}), gate: make(chan struct{})}
	l := ledger.New(s.Ledger.Store(), ledger.Options{Committer: batches})
	var wg sync.WaitGroup
	var errA, errB, errPlug error
	ep, _ := plug.Escalate(domain.ReasonCancelled, "", t0)
	ea, _ := a.Escalate(domain.ReasonCancelled, "", t0)
	eb, _ := b.Escalate(domain.ReasonCancelled, "", t0)
	wg.Go(func() {
		_, errPlug = l.Write(ctx, plug, ledger.Actor{Name: "test"}, ledger.Step{Events: []domain.Event{ep}, Work: &work.Change{Op: work.Release, ReviewID: "ow-plug"}})
	})
	<-batches.held
	wg.Go(func() {
		_, errA = l.Write(ctx, a, ledger.Actor{Name: "test"}, ledger.Step{Events: []domain.Event{ea}, Work: &work.Change{Op: work.Release, ReviewID: "ow-a"}})
	})
	wg.Go(func() {
		_, errB = l.Write(ctx, b, ledger.Actor{Name: "test"}, ledger.Step{Events: []domain.Event{eb}, Work: &work.Change{Op: work.Release, ReviewID: "ow-b"}})
	})
	for deadline := time.Now().Add(5 * time.Second); l.Stats().Waiting < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the two appends did not queue behind the first batch")
		}
	}
	close(batches.gate)
	wg.Wait()
	if errPlug != nil || errA != nil || !errors.Is(errB, eventstore.ErrWrongExpectedVersion) {
		t.Fatalf("appends = %v, %v, %v; want nil, nil and ErrWrongExpectedVersion", errPlug, errA, errB)
	}
	if got := batches.sizes(); !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("batches of %v streams, want [1 2]: ow-a and ow-b in one", got)
	}
	if n, _ := s.Store.Count(ctx); n != 1 {
		t.Fatalf("%d records, want ow-b's alone", n)
	}
	if _, held, _ := s.Store.Renew(ctx, "p", []string{"ow-a", "ow-b"}, t0.Add(time.Minute)); !slices.Equal(held, []string{"ow-b"}) {
		t.Fatalf("records held: %v, want ow-b", held)
	}
	// A create that fails its check (the review exists) writes nothing.
	ev, _ := domain.Submit(domain.SubmitCommand{ReviewID: "ow-a", ContentClass: "c", PayloadDigest: "sha256:00", Policy: policy(), Now: t0})
	_, err := s.Ledger.CreateWith(ctx, ev, ledger.Actor{Name: "test"}, work.Change{Op: work.Create, ReviewID: "ow-a", Deadline: t0, At: t0,
		Payload: work.Payload{Digest: "sha256:00", Content: []byte("other")}})
	if !errors.Is(err, eventstore.ErrWrongExpectedVersion) {
		t.Fatalf("second create = %v", err)
	}
	if n, _ := s.Store.Count(ctx); n != 1 {
		t.Fatalf("%d records after a failed create", n)
	}
	if pl, err := s.Store.Payload(ctx, "ow-a"); err != nil || string(pl.Content) != "content of ow-a" {
		t.Fatalf("content of ow-a = %q, %v: a failed create replaced it", pl.Content, err)
	}
}

// heldFirst is a Committer whose first batch waits for gate to close
// (held is closed once it waits), recording each batch's size.
type heldFirst struct {
	ledger.Committer
	held, gate chan struct{}
	mu         sync.Mutex
	batches    []int
}

func (c *heldFirst) Commit(ctx context.Context, appends []eventstore.StreamAppend, effects []*ledger.WorkChange) ([]eventstore.StreamResult, error) {
	c.mu.Lock()
	first := len(c.batches) == 0
	c.batches = append(c.batches, len(appends))
	c.mu.Unlock()
	if first {
		close(c.held)
		<-c.gate
	}
	return c.Committer.Commit(ctx, appends, effects)
}

func (c *heldFirst) sizes() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.batches)
}

func testEnsure(t *testing.T, s Subject) {
	ctx := context.Background()
	if created, err := s.Store.Ensure(ctx, "en-1", t0.Add(time.Minute), t0); err != nil || !created {
		t.Fatalf("Ensure = %v, %v", created, err)
	}
	if created, err := s.Store.Ensure(ctx, "en-1", t0.Add(time.Minute), t0); err != nil || created {
		t.Fatalf("Ensure again = %v, %v", created, err)
	}
	if n, _ := s.Store.Count(ctx); n != 1 {
		t.Fatalf("Count = %d", n)
	}
	if err := s.Store.Done(ctx, "en-1"); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.Store.Count(ctx); n != 0 {
		t.Fatalf("Count after Done = %d", n)
	}
}

func testPayloads(t *testing.T, s Subject) {
	ctx := context.Background()
	create(t, s, "pl-1", "")
	create(t, s, "pl-2", "")
	if _, err := s.Store.Payload(ctx, "nope"); !errors.Is(err, work.ErrPayloadMissing) {
		t.Fatalf("missing payload: %v", err)
	}
	if err := s.Store.Done(ctx, "pl-1"); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Store.PurgePayloads(ctx, t0); err != nil || n != 0 {
		t.Fatalf("purge before the cutoff = %d, %v", n, err)
	}
	if n, err := s.Store.PurgePayloads(ctx, t0.Add(time.Second)); err != nil || n != 1 {
		t.Fatalf("purge = %d, %v; want pl-1's alone (pl-2 is still on the automated path)", n, err)
	}
	if _, err := s.Store.Payload(ctx, "pl-1"); !errors.Is(err, work.ErrPayloadMissing) {
		t.Errorf("pl-1 after the purge: %v", err)
	}
	if pl, err := s.Store.Payload(ctx, "pl-2"); err != nil || string(pl.Content) != "content of pl-2" {
		t.Errorf("pl-2 = %q, %v", pl.Content, err)
	}
}

func testDeliveries(t *testing.T, s Subject) {
	ctx := context.Background()
	first, outcome, err := s.Store.SeeDelivery(ctx, "wh-1", "r-1", t0)
	if err != nil || !first || outcome != "" {
		t.Fatalf("first = %v %q %v", first, outcome, err)
	}
	if first, outcome, _ := s.Store.SeeDelivery(ctx, "wh-1", "r-1", t0); first || outcome != "" {
		t.Fatalf("again while in progress = %v %q", first, outcome)
	}
	if first, _, _ := s.Store.SeeDelivery(ctx, "wh-1", "r-2", t0); !first {
		t.Fatal("the same webhook-id for another review is not another delivery")
	}
	if err := s.Store.SetDeliveryOutcome(ctx, "wh-1", "r-1", work.DeliveryApplied); err != nil {
		t.Fatal(err)
	}
	if _, outcome, _ := s.Store.SeeDelivery(ctx, "wh-1", "r-1", t0); outcome != work.DeliveryApplied {
		t.Fatalf("outcome = %q", outcome)
	}
	// Forget removes only a delivery without an outcome.
	if err := s.Store.ForgetDelivery(ctx, "wh-1", "r-1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Store.ForgetDelivery(ctx, "wh-1", "r-2"); err != nil {
		t.Fatal(err)
	}
	if first, _, _ := s.Store.SeeDelivery(ctx, "wh-1", "r-1", t0); first {
		t.Fatal("a settled delivery was forgotten")
	}
	if first, _, _ := s.Store.SeeDelivery(ctx, "wh-1", "r-2", t0); !first {
		t.Fatal("an unsettled delivery was not forgotten")
	}
	if err := s.Store.PurgeDeliveries(ctx, t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if first, _, _ := s.Store.SeeDelivery(ctx, "wh-1", "r-1", t0); !first {
		t.Fatal("a purged delivery is still known")
	}
}
