package audit_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/api/audit"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/pgstore"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// A Submitted names its policy snapshot by digest; audit verify reads the
// snapshot from the store and names every review whose snapshot is
// altered or gone, even through a ledger that holds the snapshot in
// memory since it wrote it.
func TestVerifyNamesAlteredOrMissingPolicySnapshot(t *testing.T) {
	ctx := context.Background()
	pool := dbtest.Pool(t)
	store := pgstore.New(pool, pgstore.Config{})
	t.Cleanup(store.Close)
	l := ledger.New(store)
	for _, id := range []string{"p-1", "p-2"} {
		sample(t, l, id)
	}
	var stored, policy string
	if err := pool.QueryRow(ctx, `SELECT convert_from(data, 'UTF8') FROM event WHERE stream = 'review-p-1' AND revision = 0`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stored, `"policy":`) || !strings.Contains(stored, `"policy_digest":"sha256:`) {
		t.Fatalf("Submitted stored as %s, want its policy by digest only", stored)
	}
	if err := pool.QueryRow(ctx, `SELECT stream FROM event WHERE type = $1`, ledger.TypePolicySnapshot).Scan(&policy); err != nil {
		t.Fatalf("one policy snapshot stored for both reviews: %v", err)
	}
	h, err := l.History(ctx, "p-1")
	if err != nil {
		t.Fatal(err)
	}
	sub := h.Events[0].Event.(domain.Submitted)
	if policy != ledger.PolicyStreamName(sub.PolicyDigest) || sub.Policy.MaxAttempts != 3 || sub.Policy.Digest() != sub.PolicyDigest {
		t.Fatalf("resolved %+v from %s", sub, policy)
	}
	v := &audit.Verifier{Store: store, Histories: l, Now: func() time.Time { return t0 }}
	if rep, err := v.Verify(ctx, ""); err != nil || rep.Err() != nil {
		t.Fatalf("intact: %+v %v %v", rep, err, rep.Err())
	}

	exec := func(sql string) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(`UPDATE event SET data = convert_to(replace(convert_from(data, 'UTF8'), '"max_attempts":3', '"max_attempts":9'), 'UTF8')
		WHERE type = 'PolicySnapshot'`)
	for _, tc := range []struct {
		name string
		l    *ledger.Ledger
	}{{"the writing ledger", l}, {"a fresh ledger", ledger.New(store)}} {
		rep, err := (&audit.Verifier{Store: store, Histories: tc.l}).Verify(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		if got := audit.DamagedIDs(rep.Damaged); !slices.Equal(got, []string{"p-1", "p-2"}) || !strings.Contains(rep.Err().Error(), "do not hash to it (altered)") {
			t.Fatalf("altered snapshot, %s: damaged %v\n%v", tc.name, got, rep.Err())
		}
	}
	exec(`DELETE FROM event WHERE type = 'PolicySnapshot'`)
	rep, err := (&audit.Verifier{Store: store, Histories: ledger.New(store)}).Verify(ctx, "p-2")
	if err != nil {
		t.Fatal(err)
	}
	if got := audit.DamagedIDs(rep.Damaged); !slices.Equal(got, []string{"p-2"}) || !strings.Contains(rep.Err().Error(), "policy snapshot not stored") {
		t.Fatalf("missing snapshot: damaged %v\n%v", got, rep.Err())
	}
}
