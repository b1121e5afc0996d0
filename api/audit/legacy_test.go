package audit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/api/audit"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/memstore"
	"github.com/reviewledger/reviewledger/eventstore/pgstore"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// legacyReviews are the reviews of testdata/legacy_v1: the stored events,
// byte for byte, of a ledger written by schema 1 (release 0178c7b, every
// Submitted with its policy inline and the metadata in its first form),
// and the replay that release rendered of each.
var legacyReviews = []string{"cap-1", "rule-1", "cap-2", "cap-3"}

func legacyRecords(t *testing.T) []eventstore.RecordedEvent {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "legacy_v1", "events.json"))
	if err != nil {
		t.Fatal(err)
	}
	var recs []eventstore.RecordedEvent
	if err := json.Unmarshal(b, &recs); err != nil {
		t.Fatal(err)
	}
	return recs
}

// restore writes the stored events again, in their order, as they were.
func restore(t *testing.T, store eventstore.Store, recs []eventstore.RecordedEvent) {
	t.Helper()
	for _, r := range recs {
		expected := eventstore.NoStream
		if r.Revision > 0 {
			expected = eventstore.Exact(r.Revision - 1)
		}
		if _, err := store.AppendMulti(context.Background(), eventstore.StreamAppend{Stream: r.Stream, Expected: expected,
			Events: []eventstore.EventData{{ID: r.ID, Type: r.Type, Data: r.Data, Metadata: r.Metadata}}}); err != nil {
			t.Fatalf("restore %s revision %d: %v", r.Stream, r.Revision, err)
		}
	}
}

// TestLedgerOfSchema1ReadsAsItWas: a ledger written by the previous
// release reads the same under this one, on every backend: every event
// decodes, every review rebuilds with the policy its Submitted held
// inline, audit verify finds it intact, the replays are those the previous
// release rendered, and a stream of schema 1 events goes on with schema 2
// ones under one hash chain.
func TestLedgerOfSchema1ReadsAsItWas(t *testing.T) {
	recs := legacyRecords(t)
	t.Run("memstore", func(t *testing.T) {
		store := memstore.New()
		i := 0
		store.Now = func() time.Time { return recs[min(i, len(recs)-1)].RecordedAt }
		for ; i < len(recs); i++ {
			restore(t, store, recs[i:i+1])
		}
		checkLegacy(t, store, nil)
	})
	t.Run("pgstore", func(t *testing.T) {
		pool := dbtest.Pool(t)
		store := pgstore.New(pool, pgstore.Config{})
		t.Cleanup(store.Close)
		restore(t, store, recs)
		if _, err := pool.Exec(context.Background(), `UPDATE event SET recorded_at = $1`, t0); err != nil {
			t.Fatal(err)
		}
		checkLegacy(t, store, pool)
	})
}

func checkLegacy(t *testing.T, store eventstore.Store, pool *pgxpool.Pool) {
	ctx := context.Background()
	l := ledger.New(store)
	inline := map[string]domain.PolicySnapshot{}
	for _, r := range legacyRecords(t) {
		var m struct {
			Schema int `json:"schema"`
		}
		if err := json.Unmarshal(r.Metadata, &m); err != nil || m.Schema != 1 {
			t.Fatalf("fixture %s revision %d: schema %d %v, want 1", r.Stream, r.Revision, m.Schema, err)
		}
		if r.Type == domain.TypeSubmitted {
			var s struct {
				ReviewID string                `json:"review_id"`
				Policy   domain.PolicySnapshot `json:"policy"`
			}
			if err := json.Unmarshal(r.Data, &s); err != nil || s.Policy.BudgetMS == 0 {
				t.Fatalf("fixture %s: no inline policy (%v)", r.Stream, err)
			}
			inline[s.ReviewID] = s.Policy
		}
	}
	for _, id := range legacyReviews {
		h, err := l.History(ctx, id)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if err := h.Verify(); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if got := h.Events[0].Event.(domain.Submitted); got.Policy != inline[id] || got.PolicyDigest != "" {
			t.Errorf("%s: policy %+v (digest %q), want the inline %+v", id, got.Policy, got.PolicyDigest, inline[id])
		}
		rv, err := l.Load(ctx, id)
		if err != nil || !reflect.DeepEqual(rv.Policy(), inline[id].ClassPolicy()) {
			t.Fatalf("%s: load: %v, policy %+v", id, err, rv)
		}
		r, err := audit.NewReplay(h, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		conflicts, err := l.Conflicts(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		r.AddConflicts(conflicts)
		var buf bytes.Buffer
		if err := r.Render(&buf); err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join("testdata", "legacy_v1", id+".replay"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf.Bytes(), want) {
			t.Errorf("%s: replay differs from the previous release's\ngot:\n%s\nwant:\n%s", id, buf.Bytes(), want)
		}
	}
	v := &audit.Verifier{Store: store, Histories: l, Now: func() time.Time { return t0 }}
	if pool != nil {
		v.Anchors = audit.PGAnchors{Pool: pool}
	}
	rep, err := v.Verify(ctx, "")
	if err != nil || rep.Err() != nil || rep.Reviews != len(legacyReviews) {
		t.Fatalf("verify: %+v %v %v", rep, err, rep.Err())
	}

	// The conflict stream of cap-3 (schema 1) and a new review go on under
	// schema 2; one chain holds across the two forms.
	rv, err := l.Load(ctx, "cap-3")
	if err != nil {
		t.Fatal(err)
	}
	c, err := rv.RecordConflict(domain.Conflict{Attempt: 2, Source: domain.SourceCallback, Reason: domain.ConflictDuplicateDelivery,
		Detail: "webhook delivered again"}, at(11500))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.RecordConflict(ctx, c, ledger.Actor{Name: "provider"}); err != nil {
		t.Fatal(err)
	}
	log, err := l.Conflicts(ctx, "cap-3")
	if err != nil || len(log.Events) != 2 || log.Events[0].Metadata.Schema != 1 || log.Events[1].Metadata.Schema != domain.SchemaVersion {
		t.Fatalf("conflicts of cap-3: %+v %v", log, err)
	}
	if err := log.Verify(); err != nil {
		t.Fatalf("a schema 2 event on a schema 1 chain: %v", err)
	}
	sample(t, l, "after-upgrade")
	rep, err = v.Verify(ctx, "")
	if err != nil || rep.Err() != nil || rep.Reviews != len(legacyReviews)+1 {
		t.Fatalf("verify after new events: %+v %v %v", rep, err, rep.Err())
	}
}
