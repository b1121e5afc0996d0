package audit_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/reviewledger/reviewledger/api/audit"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/pgstore"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// sample writes a review with timeouts and a decision (9 events).
func sample(t testing.TB, l *ledger.Ledger, id string) {
	t.Helper()
	s := &script{t: t, l: l}
	s.submit(id, "caption_suggestion", at(0)).
		attempt(at(5)).timeout(1, domain.ClassDeadlineExceeded, at(10005)).
		attempt(at(10180)).timeout(2, domain.ClassProviderUnavailable, at(10400)).
		attempt(at(10700)).timeout(3, domain.ClassTransportError, at(12000)).
		escalate(domain.ReasonAttemptsExhausted, at(12001)).
		decide("mona", domain.DecisionRejected, "no", at(95000))
}

func TestVerifyFindsTamperingInSQL(t *testing.T) {
	ctx := context.Background()
	pool := dbtest.Pool(t)
	store := pgstore.New(pool, pgstore.Config{})
	t.Cleanup(store.Close)
	l := ledger.New(store)
	ids := []string{"intact-1", "alter", "delete-middle", "swap", "truncate", "gone", "rewrite", "intact-2"}
	for _, id := range ids {
		sample(t, l, id)
	}
	v := &audit.Verifier{Store: store, Histories: l, Anchors: audit.PGAnchors{Pool: pool}, Now: func() time.Time { return t0 }}

	rep, err := v.Verify(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Err() != nil || rep.Reviews != len(ids) || rep.Events != 9*len(ids) || rep.Anchored != len(ids) {
		t.Fatalf("intact ledger: %+v %v", rep, rep.Err())
	}

	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// Alter a body: the classification of attempt 1.
	exec(`UPDATE event SET data = convert_to(replace(convert_from(data, 'UTF8'), 'deadline_exceeded', 'transport_error'), 'UTF8')
		WHERE stream = 'review-alter' AND revision = 2`)
	// Remove an event in the middle.
	exec(`DELETE FROM event WHERE stream = 'review-delete-middle' AND revision = 3`)
	// Swap two events.
	exec(`UPDATE event SET revision = 1000 WHERE stream = 'review-swap' AND revision = 2`)
	exec(`UPDATE event SET revision = 2 WHERE stream = 'review-swap' AND revision = 4`)
	exec(`UPDATE event SET revision = 4 WHERE stream = 'review-swap' AND revision = 1000`)
	// Remove the tail, and a whole review: the chain cannot show these,
	// the anchors do.
	exec(`DELETE FROM event WHERE stream = 'review-truncate' AND revision >= 7`)
	exec(`DELETE FROM event WHERE stream = 'review-gone'`)
	// Rewrite a history with a valid, recomputed chain.
	exec(`DELETE FROM event WHERE stream = 'review-rewrite'`)
	s := &script{t: t, l: l}
	s.submit("rewrite", "caption_suggestion", at(0)).
		attempt(at(5)).timeout(1, domain.ClassDeadlineExceeded, at(10005)).
		attempt(at(10180)).timeout(2, domain.ClassProviderUnavailable, at(10400)).
		attempt(at(10700)).timeout(3, domain.ClassTransportError, at(12000)).
		escalate(domain.ReasonAttemptsExhausted, at(12001)).
		decide("mallory", domain.DecisionAccepted, "fine", at(95000))

	rep, err = v.Verify(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	damaged := audit.DamagedIDs(rep.Damaged)
	slices.Sort(damaged)
	want := []string{"alter", "delete-middle", "gone", "rewrite", "swap", "truncate"}
	if !slices.Equal(damaged, want) {
		t.Fatalf("damaged %v, want %v\n%v", damaged, want, rep.Err())
	}
	err = rep.Err()
	if !errors.Is(err, audit.ErrDamaged) {
		t.Fatalf("Err() = %v", err)
	}
	for _, id := range want {
		if !strings.Contains(err.Error(), "review "+id+":") {
			t.Errorf("report does not name %s:\n%v", id, err)
		}
	}
	for _, s := range []string{"altered", "removed or reordered", "events after revision 6 removed", "every event removed", "history rewritten"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("report does not say %q:\n%v", s, err)
		}
	}
	// Only intact reviews' anchors moved.
	if rep.Anchored != 2 {
		t.Errorf("anchored %d, want the 2 intact reviews", rep.Anchored)
	}
	// Checked one at a time, the reviews give the same report, damage in
	// the same order, as checked many at once.
	serial := *v
	serial.Workers = 1
	srep, err := serial.Verify(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(srep.Damaged, rep.Damaged) || srep.Reviews != rep.Reviews || srep.Events != rep.Events {
		t.Errorf("one at a time: %+v\nmany at once: %+v", srep, rep)
	}
	// Read in batches of three (a batch holding intact and damaged
	// reviews, one only a removed review), and read one review a read
	// (Histories without Histories), they give the same report too.
	for name, variant := range map[string]audit.Verifier{
		"batches of three":    {Store: store, Histories: l, BatchSize: 3},
		"one review per read": {Store: store, Histories: historyOnly{l}},
	} {
		variant.Anchors, variant.Now = v.Anchors, v.Now
		vrep, err := variant.Verify(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(vrep.Damaged, rep.Damaged) || vrep.Reviews != rep.Reviews || vrep.Events != rep.Events || vrep.Anchored != rep.Anchored {
			t.Errorf("%s: %+v\nin one batch: %+v", name, vrep, rep)
		}
	}

	// One review at a time.
	one, err := v.Verify(ctx, "intact-1")
	if err != nil || one.Err() != nil || one.Reviews != 1 {
		t.Fatalf("intact-1: %+v %v", one, err)
	}
	one, err = v.Verify(ctx, "gone")
	if err != nil || !slices.Equal(audit.DamagedIDs(one.Damaged), []string{"gone"}) {
		t.Fatalf("gone: %+v %v", one, err)
	}
	if _, err := v.Verify(ctx, "bad id"); !errors.Is(err, domain.ErrInvalidReviewID) {
		t.Fatalf("bad id: %v", err)
	}
}

// historyOnly reads one review a read: a Histories that is no
// BatchHistories.
type historyOnly struct{ l *ledger.Ledger }

func (h historyOnly) History(ctx context.Context, id string) (*ledger.History, error) {
	return h.l.History(ctx, id)
}

// TestVerifyListsStreamsWithoutALister covers stores without Streams: the
// verifier reads the global order.
func TestVerifyListsStreamsWithoutALister(t *testing.T) {
	now := t0
	l := newLedger(&now)
	sample(t, l, "a")
	sample(t, l, "b")
	v := &audit.Verifier{Store: l.Store(), Histories: l}
	rep, err := v.Verify(context.Background(), "")
	if err != nil || rep.Reviews != 2 || rep.Events != 18 || rep.Err() != nil {
		t.Fatalf("%+v %v", rep, err)
	}
}

// TestVerifyCrossChecksReviewSummary: the review_summary read model
// witnesses how far each review got.
func TestVerifyCrossChecksReviewSummary(t *testing.T) {
	ctx := context.Background()
	pool := dbtest.Pool(t)
	now := t0
	l := newLedger(&now)
	sample(t, l, "a")
	sample(t, l, "b")
	for id, version := range map[string]int{"a": 8, "b": 12, "c": 3} {
		_, err := pool.Exec(ctx, `INSERT INTO review_summary (review_id, content_class, state, attempts, version, submitted_at, deadline, human_gate, updated_at)
			VALUES ($1, 'caption_suggestion', 'rejected', 3, $2, $3, $3, false, $3)`, id, version, t0)
		if err != nil {
			t.Fatal(err)
		}
	}
	v := &audit.Verifier{Store: l.Store(), Histories: l, Witnesses: []audit.Witness{audit.PGSummaries{Pool: pool}}}
	rep, err := v.Verify(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := audit.DamagedIDs(rep.Damaged); !slices.Equal(got, []string{"b", "c"}) || rep.Reviews != 3 {
		t.Fatalf("damaged %v of %d: %v", got, rep.Reviews, rep.Err())
	}
	msg := rep.Err().Error()
	if !strings.Contains(msg, "review b: revision 9: events after revision 8 removed (review_summary saw revision 12)") ||
		!strings.Contains(msg, "review c: revision 0: every event removed (review_summary saw revision 3)") {
		t.Fatalf("report:\n%s", msg)
	}
}

// TestWitnessErrorsCarryNoDriverType: the PostgreSQL witnesses translate
// the driver's errors; a cancelled context stays matchable.
func TestWitnessErrorsCarryNoDriverType(t *testing.T) {
	ctx := context.Background()
	pool := dbtest.Pool(t)
	if _, err := pool.Exec(ctx, `DROP TABLE audit_anchor_page; DROP TABLE review_summary`); err != nil {
		t.Fatal(err)
	}
	anchors := audit.PGAnchors{Pool: pool}
	for _, w := range []audit.Witness{anchors, audit.PGSummaries{Pool: pool}} {
		_, err := w.Marks(ctx, nil)
		var pgErr *pgconn.PgError
		if err == nil || errors.As(err, &pgErr) || !strings.Contains(err.Error(), "does not exist") {
			t.Errorf("%s on a dropped table: %v (%T)", w.Name(), err, err)
		}
		err = w.(audit.ReviewLister).ReviewIDs(ctx, func(string) error { return nil })
		if err == nil || errors.As(err, &pgErr) || !strings.Contains(err.Error(), "does not exist") {
			t.Errorf("%s listing its reviews on a dropped table: %v (%T)", w.Name(), err, err)
		}
	}
	err := anchors.Advance(ctx, map[string]audit.Mark{"r1": {Revision: 1, Hash: "h"}}, t0)
	var pgErr *pgconn.PgError
	if err == nil || errors.As(err, &pgErr) {
		t.Errorf("Advance on a dropped table: %v (%T)", err, err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := anchors.Marks(cancelled, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("Marks with a cancelled context: %v", err)
	}
}

// TestVerifyWritesOnlyMovedAnchors: a verification anchors every intact
// review's head, and one after it rewrites none of those already anchored
// there, only the heads it has not seen.
func TestVerifyWritesOnlyMovedAnchors(t *testing.T) {
	ctx := context.Background()
	pool := dbtest.Pool(t)
	store := pgstore.New(pool, pgstore.Config{})
	t.Cleanup(store.Close)
	l := ledger.New(store)
	for _, id := range []string{"a-1", "a-2"} {
		sample(t, l, id)
	}
	anchors := &recordingAnchors{Anchors: audit.PGAnchors{Pool: pool}}
	verify := func(at time.Time, want int, moved ...string) {
		t.Helper()
		anchors.moved = nil
		v := &audit.Verifier{Store: store, Histories: l, Anchors: anchors, Now: func() time.Time { return at }}
		rep, err := v.Verify(ctx, "")
		if err != nil || rep.Err() != nil || rep.Anchored != want {
			t.Fatalf("verify at %s: %+v, %v; want %d anchored", at, rep, err, want)
		}
		if got := slices.Sorted(maps.Keys(anchors.moved)); !slices.Equal(got, moved) {
			t.Fatalf("verify at %s advanced the anchors of %v, want %v", at, got, moved)
		}
	}
	verify(t0, 2, "a-1", "a-2")
	sample(t, l, "a-3")
	verify(t0.Add(time.Hour), 3, "a-3")
	got, err := audit.PGAnchors{Pool: pool}.Marks(ctx, nil)
	if err != nil || len(got) != 3 {
		t.Fatalf("anchors %v, %v; want a-1, a-2 and a-3", got, err)
	}
	for id, m := range got {
		if m.Revision != 8 {
			t.Errorf("%s anchored at revision %d, want its head, 8", id, m.Revision)
		}
	}
}

// recordingAnchors records the marks every Advance is given.
type recordingAnchors struct {
	audit.Anchors
	mu    sync.Mutex
	moved map[string]audit.Mark
}

// ReviewIDs lists the reviews of the anchors it records, as they do.
func (r *recordingAnchors) ReviewIDs(ctx context.Context, each func(id string) error) error {
	return r.Anchors.(audit.ReviewLister).ReviewIDs(ctx, each)
}

func (r *recordingAnchors) Advance(ctx context.Context, marks map[string]audit.Mark, at time.Time) error {
	r.mu.Lock()
	if r.moved == nil {
		r.moved = make(map[string]audit.Mark)
	}
	maps.Copy(r.moved, marks)
	r.mu.Unlock()
	return r.Anchors.Advance(ctx, marks, at)
}

// A review verified alone reads its witnesses one after the other, on the
// connection it already has: a second one would be a server session
// started, most of what audit verify --review takes.
func TestVerifyOneReviewOnOneConnection(t *testing.T) {
	ctx := context.Background()
	url := dbtest.URL(t)
	writer := pgstore.New(dbtest.PoolOn(t, url, nil), pgstore.Config{})
	t.Cleanup(writer.Close)
	sample(t, ledger.New(writer), "one-1")
	// The verifier's pool and store are its own: nothing else (the
	// writer's notifier) takes a connection from them.
	pool := dbtest.PoolOn(t, url, nil)
	store := pgstore.New(pool, pgstore.Config{})
	t.Cleanup(store.Close)
	anchors := audit.PGAnchors{Pool: pool}
	v := &audit.Verifier{Store: store, Histories: ledger.New(store), Witnesses: []audit.Witness{audit.PGSummaries{Pool: pool}, anchors},
		Anchors: anchors, Now: func() time.Time { return t0 }}
	if rep, err := v.Verify(ctx, "one-1"); err != nil || rep.Err() != nil || rep.Anchored != 1 {
		t.Fatalf("first verify: %+v, %v", rep, err)
	}
	// Every connection but one closed: the next verify finds one idle.
	idle := pool.AcquireAllIdle(ctx)
	if len(idle) == 0 {
		t.Fatal("no idle connection after a verify")
	}
	for _, c := range idle[1:] {
		c.Hijack().Close(ctx)
	}
	idle[0].Release()
	before := pool.Stat().NewConnsCount()
	for range 20 {
		if rep, err := v.Verify(ctx, "one-1"); err != nil || rep.Err() != nil || rep.Reviews != 1 {
			t.Fatalf("verify: %+v, %v", rep, err)
		}
	}
	if n := pool.Stat().NewConnsCount() - before; n != 0 {
		t.Fatalf("20 verifies of one review opened %d connections, want none", n)
	}
}
