package audit_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/api/audit"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/pgstore"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// TestVerifyInChunksFindsWhatOneChunkFinds: checked in chunks of one,
// three or the default, a ledger with a truncated review, one removed
// entirely and one altered gives the same report, and every intact
// review is anchored at its head.
func TestVerifyInChunksFindsWhatOneChunkFinds(t *testing.T) {
	ctx := context.Background()
	pool := dbtest.Pool(t)
	store := pgstore.New(pool, pgstore.Config{})
	t.Cleanup(store.Close)
	l := ledger.New(store)
	var ids []string
	for i := range 10 {
		ids = append(ids, fmt.Sprintf("c-%02d", i))
		sample(t, l, ids[i])
	}
	first := &audit.Verifier{Store: store, Histories: l, Anchors: audit.PGAnchors{Pool: pool}, ChunkSize: 3, Now: func() time.Time { return t0 }}
	rep, err := first.Verify(ctx, "")
	if err != nil || rep.Err() != nil || rep.Reviews != 10 || rep.Anchored != 10 {
		t.Fatalf("intact ledger in chunks of 3: %+v, %v", rep, err)
	}
	marks, err := audit.PGAnchors{Pool: pool}.Marks(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	anchored := 0
	for _, m := range marks {
		if m.Revision == 8 {
			anchored++
		}
	}
	if anchored != 10 {
		t.Fatalf("%d reviews anchored at their head (revision 8), want 10", anchored)
	}
	for _, sql := range []string{
		`DELETE FROM event WHERE stream = 'review-c-00'`,                   // the first listed: removed
		`DELETE FROM event WHERE stream = 'review-c-04' AND revision >= 6`, // truncated
		`DELETE FROM event WHERE stream = 'review-c-09'`,                   // the last listed: removed
		`UPDATE event SET data = convert_to(replace(convert_from(data, 'UTF8'), 'deadline_exceeded', 'transport_error'), 'UTF8')
			WHERE stream = 'review-c-07' AND revision = 2`, // altered
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	var reports []audit.Report
	anchors := &recordingAnchors{Anchors: audit.PGAnchors{Pool: pool}}
	for _, size := range []int{1, 3, 0} {
		v := &audit.Verifier{Store: store, Histories: l, Anchors: anchors, ChunkSize: size, Now: func() time.Time { return t0.Add(time.Hour) }}
		rep, err := v.Verify(ctx, "")
		if err != nil {
			t.Fatalf("chunks of %d: %v", size, err)
		}
		if got := audit.DamagedIDs(rep.Damaged); !slices.Equal(got, []string{"c-04", "c-07", "c-00", "c-09"}) || rep.Reviews != 10 || rep.Anchored != 6 {
			t.Fatalf("chunks of %d: damaged %v, %d reviews, %d anchored; want c-04, c-07, c-00, c-09 of 10, 6 anchored", size, got, rep.Reviews, rep.Anchored)
		}
		reports = append(reports, rep)
	}
	for i, rep := range reports[1:] {
		if rep.Err().Error() != reports[0].Err().Error() || rep.Events != reports[0].Events {
			t.Errorf("report %d differs from the one of chunks of 1:\n%v\n%v", i+1, rep.Err(), reports[0].Err())
		}
	}
	if len(anchors.moved) != 0 {
		t.Errorf("anchors of %v advanced where nothing moved", slices.Sorted(maps.Keys(anchors.moved)))
	}
	var rewritten int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM audit_anchor_page WHERE anchored_at > $1`, t0).Scan(&rewritten); err != nil {
		t.Fatal(err)
	}
	if rewritten != 0 {
		t.Errorf("%d pages of anchors rewritten where nothing moved", rewritten)
	}
}

// failingAnchors is an Anchors whose Advance fails from its failAt-th
// call on.
type failingAnchors struct {
	mu       sync.Mutex
	calls    int
	failAt   int
	advanced []string
}

func (a *failingAnchors) Name() string { return "audit anchor" }

func (a *failingAnchors) Marks(context.Context, []string) (map[string]audit.Mark, error) {
	return map[string]audit.Mark{}, nil
}

var errAnchorWrite = errors.New("anchor write refused")

func (a *failingAnchors) Advance(_ context.Context, marks map[string]audit.Mark, _ time.Time) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls++
	if a.calls >= a.failAt {
		return errAnchorWrite
	}
	for id := range marks {
		a.advanced = append(a.advanced, id)
	}
	return nil
}

// TestVerifyStopsOnAFailedAdvance: an Advance that fails while the next
// chunk is checked stops the verification with its error; the chunks
// before it stay anchored.
func TestVerifyStopsOnAFailedAdvance(t *testing.T) {
	now := t0
	l := newLedger(&now)
	for i := range 7 {
		sample(t, l, fmt.Sprintf("f-%d", i))
	}
	anchors := &failingAnchors{failAt: 2}
	v := &audit.Verifier{Store: l.Store(), Histories: l, Anchors: anchors, ChunkSize: 3}
	_, err := v.Verify(context.Background(), "")
	if !errors.Is(err, errAnchorWrite) {
		t.Fatalf("verify with the second Advance failing: %v, want %v", err, errAnchorWrite)
	}
	slices.Sort(anchors.advanced)
	if !slices.Equal(anchors.advanced, []string{"f-0", "f-1", "f-2"}) || anchors.calls != 2 {
		t.Fatalf("advanced %v in %d calls, want the first chunk's, then the failed call", anchors.advanced, anchors.calls)
	}
}
