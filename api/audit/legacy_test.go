package audit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
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

// legacyReviews are the reviews of the fixtures in testdata/legacy_v*: the
// stored events, byte for byte, of a ledger written by an earlier release,
// and the replay that release rendered of each.
var legacyReviews = []string{"cap-1", "rule-1", "cap-2", "cap-3"}

// legacyFixture is one earlier release's ledger.
type legacyFixture struct {
	dir    string
	schema int // of every event's metadata
	// inline is true when every Submitted holds its policy (schema 1),
	// false when it names it by digest.
	inline bool
}

var legacyFixtures = []legacyFixture{
	// Schema 1 (release 0178c7b): every Submitted with its policy inline
	// and the metadata in its first form.
	{dir: "legacy_v1", schema: 1, inline: true},
	// Schema 2 (release 8e22bd6): policies stored once and named by
	// digest, compact metadata, every body an object; with a failover, a
	// shadow observation and a conflicting completion.
	{dir: "legacy_v2", schema: 2},
	// Schema 3 (release eb77e09): compact bodies, compact JSON metadata;
	// the reviews of legacy_v2 written again by that release, each
	// Submitted with a whole payload digest so its body is compact too.
	{dir: "legacy_v3", schema: 3},
}

// compact reports whether the fixture's schema stores the bodies of the
// events every review writes compact (schema 3 on).
func (fx legacyFixture) compact() bool { return fx.schema >= 3 }

// compactTypes are the events every review writes, whose bodies schema 3
// stores compact (domain.EncodeStored); every other body is an object.
var compactTypes = map[string]bool{domain.TypeSubmitted: true, domain.TypeAttemptStarted: true,
	domain.TypeAttemptTimedOut: true, domain.TypeFindingReceived: true, domain.TypeEscalated: true}

func legacyRecords(t *testing.T, fx legacyFixture) []eventstore.RecordedEvent {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", fx.dir, "events.json"))
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

// TestLedgerOfEarlierSchemasReadsAsItWas: a ledger written by an earlier
// release reads the same under this one, on every backend: every event
// decodes, every review rebuilds with the policy its Submitted held
// (inline, or named by digest), audit verify finds it intact, the replays
// are those the earlier release rendered, and its streams go on with
// events of this release's schema under one hash chain.
func TestLedgerOfEarlierSchemasReadsAsItWas(t *testing.T) {
	for _, fx := range legacyFixtures {
		t.Run(fx.dir, func(t *testing.T) {
			recs := legacyRecords(t, fx)
			t.Run("memstore", func(t *testing.T) {
				store := memstore.New()
				i := 0
				store.Now = func() time.Time { return recs[min(i, len(recs)-1)].RecordedAt }
				for ; i < len(recs); i++ {
					restore(t, store, recs[i:i+1])
				}
				checkLegacy(t, fx, store, nil)
			})
			t.Run("pgstore", func(t *testing.T) {
				pool := dbtest.Pool(t)
				store := pgstore.New(pool, pgstore.Config{})
				t.Cleanup(store.Close)
				restore(t, store, recs)
				if _, err := pool.Exec(context.Background(), `UPDATE event SET recorded_at = $1`, t0); err != nil {
					t.Fatal(err)
				}
				checkLegacy(t, fx, store, pool)
			})
		})
	}
}

func checkLegacy(t *testing.T, fx legacyFixture, store eventstore.Store, pool *pgxpool.Pool) {
	ctx := context.Background()
	l := ledger.New(store)
	policies := policiesOf(t, fx)
	reviews := legacyReviews
	if !fx.inline {
		reviews = append(slices.Clip(reviews), "cap-4") // pending: it goes on below
	}
	for _, id := range reviews {
		h, err := l.History(ctx, id)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if err := h.Verify(); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if got := h.Events[0].Event.(domain.Submitted); got.Policy != policies[id].policy || got.PolicyDigest != policies[id].digest {
			t.Errorf("%s: policy %+v (digest %q), want %+v (digest %q)", id, got.Policy, got.PolicyDigest, policies[id].policy, policies[id].digest)
		}
		for _, e := range h.Events {
			body, err := e.Body()
			if err != nil || !domain.IsCompact(e.Data) && !bytes.Equal(body, e.Data) {
				t.Errorf("%s revision %d: body %s, %v; want it as stored, %s", id, e.Revision, body, err, e.Data)
				continue
			}
			if domain.IsCompact(e.Data) {
				// Shown canonical, it stores again as it was stored.
				ev, err := domain.DecodeEvent(e.Type, body)
				if err != nil || domain.IsCompact(body) {
					t.Errorf("%s revision %d: canonical body %s, %v", id, e.Revision, body, err)
					continue
				}
				if back, err := domain.EncodeStored(id, ev); err != nil || !bytes.Equal(back, e.Data) {
					t.Errorf("%s revision %d: body %s stores as %s, %v; want %s", id, e.Revision, body, back, err, e.Data)
				}
			}
		}
		rv, err := l.Load(ctx, id)
		if err != nil || !reflect.DeepEqual(rv.Policy(), policies[id].policy.ClassPolicy()) {
			t.Fatalf("%s: load: %v, policy %+v", id, err, rv)
		}
		got := render(t, l, h)
		want, err := os.ReadFile(filepath.Join("testdata", fx.dir, id+".replay"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: replay differs from the earlier release's\ngot:\n%s\nwant:\n%s", id, got, want)
		}
	}
	v := &audit.Verifier{Store: store, Histories: l, Now: func() time.Time { return t0 }}
	if pool != nil {
		v.Anchors = audit.PGAnchors{Pool: pool}
	}
	rep, err := v.Verify(ctx, "")
	if err != nil || rep.Err() != nil || rep.Reviews != len(reviews) {
		t.Fatalf("verify: %+v %v %v", rep, err, rep.Err())
	}

	// The conflict stream of cap-3 and a new review go on under this
	// release's schema; one chain holds across the forms.
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
	if err != nil || len(log.Events) != 2 || log.Events[0].Metadata.Schema != fx.schema || log.Events[1].Metadata.Schema != domain.SchemaVersion {
		t.Fatalf("conflicts of cap-3: %+v %v", log, err)
	}
	if err := log.Verify(); err != nil {
		t.Fatalf("a schema %d event on a schema %d chain: %v", domain.SchemaVersion, fx.schema, err)
	}
	if !fx.inline {
		goesOnCompact(t, l, fx, "cap-4")
	}
	sample(t, l, "after-upgrade")
	rep, err = v.Verify(ctx, "")
	if err != nil || rep.Err() != nil || rep.Reviews != len(reviews)+1 {
		t.Fatalf("verify after new events: %+v %v %v", rep, err, rep.Err())
	}
}

// goesOnCompact records a finding on the pending review id of an earlier
// schema: its body is stored compact, on the same hash chain as the ones
// before it (canonical before schema 3), and /events shows it canonical.
func goesOnCompact(t *testing.T, l *ledger.Ledger, fx legacyFixture, id string) {
	t.Helper()
	ctx := context.Background()
	rv, err := l.Load(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	es, err := rv.RecordFinding(domain.Finding{ReviewID: id, Attempt: 1, State: domain.DecisionRejected, Reasons: []string{"policy-7"}},
		domain.SourceResponse, at(1400))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, rv, ledger.Actor{Name: "runner"}, es...); err != nil {
		t.Fatal(err)
	}
	h, err := l.History(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Verify(); err != nil {
		t.Fatalf("%s: a schema %d body on a chain of schema %d ones: %v", id, domain.SchemaVersion, fx.schema, err)
	}
	last := h.Events[len(h.Events)-1]
	if !domain.IsCompact(last.Data) || domain.IsCompact(h.Events[0].Data) != fx.compact() || last.Metadata.Schema != domain.SchemaVersion {
		t.Fatalf("%s: stored %s after %s (schema %d)", id, last.Data, h.Events[0].Data, last.Metadata.Schema)
	}
	body, err := last.Body()
	want := `{"review_id":"cap-4","attempt":1,"state":"rejected","reasons":["policy-7"],"source":"response","elapsed_ms":395,"received_at":"2026-11-30T12:00:01.4Z"}`
	if err != nil || string(body) != want {
		t.Fatalf("%s: canonical body %s, %v; want %s", id, body, err, want)
	}
	if snap, err := h.Snapshot(); err != nil || snap.State() != domain.StateRejected {
		t.Fatalf("%s: rebuilt %+v, %v", id, snap, err)
	}
}

// render is a review's replay with its conflicts and shadows.
func render(t *testing.T, l *ledger.Ledger, h *ledger.History) []byte {
	t.Helper()
	ctx := context.Background()
	r, err := audit.NewReplay(h, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	conflicts, err := l.Conflicts(ctx, h.ReviewID)
	if err != nil {
		t.Fatal(err)
	}
	r.AddConflicts(conflicts)
	shadows, err := l.Shadows(ctx, h.ReviewID)
	if err != nil {
		t.Fatal(err)
	}
	r.AddShadows(shadows)
	var buf bytes.Buffer
	if err := r.Render(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// heldPolicy is the policy a fixture's Submitted holds, and the digest it
// names it by (none when inline).
type heldPolicy struct {
	policy domain.PolicySnapshot
	digest string
}

// policiesOf reads from the fixture's stored bytes, by review, the policy
// each Submitted holds inline or names by digest, checking that every
// event's metadata is of the fixture's schema and that its body is
// compact exactly when the schema stores it so.
func policiesOf(t *testing.T, fx legacyFixture) map[string]heldPolicy {
	t.Helper()
	recs := legacyRecords(t, fx)
	snapshots := map[string]domain.PolicySnapshot{}
	for _, r := range recs {
		if r.Type == ledger.TypePolicySnapshot {
			var p domain.PolicySnapshot
			if err := json.Unmarshal(r.Data, &p); err != nil {
				t.Fatal(err)
			}
			snapshots[domain.PolicyDigest(r.Data)] = p
		}
	}
	out := map[string]heldPolicy{}
	for _, r := range recs {
		if r.Type == ledger.TypePolicySnapshot {
			continue
		}
		m, err := ledger.DecodeMetadata(r.Metadata)
		if err != nil || m.Schema != fx.schema {
			t.Fatalf("fixture %s revision %d: schema %d %v, want %d", r.Stream, r.Revision, m.Schema, err, fx.schema)
		}
		if domain.IsCompact(r.Data) != (fx.compact() && compactTypes[r.Type]) {
			t.Fatalf("fixture %s revision %d: a %s body %s in schema %d", r.Stream, r.Revision, r.Type, r.Data, fx.schema)
		}
		if r.Type != domain.TypeSubmitted {
			continue
		}
		var s struct {
			ReviewID     string                `json:"review_id"`
			Policy       domain.PolicySnapshot `json:"policy"`
			PolicyDigest string                `json:"policy_digest"`
		}
		if domain.IsCompact(r.Data) {
			// The review ID is the stream's, not the body's.
			id, ok := strings.CutPrefix(r.Stream, "review-")
			e, err := domain.DecodeStored(id, r.Type, r.Data)
			sub, isSub := e.(domain.Submitted)
			if !ok || err != nil || !isSub {
				t.Fatalf("fixture %s revision %d: %T %v", r.Stream, r.Revision, e, err)
			}
			s.ReviewID, s.Policy, s.PolicyDigest = sub.ReviewID, sub.Policy, sub.PolicyDigest
		} else if err := json.Unmarshal(r.Data, &s); err != nil {
			t.Fatal(err)
		}
		switch {
		case fx.inline && s.Policy.BudgetMS != 0 && s.PolicyDigest == "":
			out[s.ReviewID] = heldPolicy{policy: s.Policy}
		case !fx.inline && s.PolicyDigest != "" && snapshots[s.PolicyDigest].BudgetMS != 0:
			out[s.ReviewID] = heldPolicy{policy: snapshots[s.PolicyDigest], digest: s.PolicyDigest}
		default:
			t.Fatalf("fixture %s: policy %+v, digest %q", r.Stream, s.Policy, s.PolicyDigest)
		}
	}
	return out
}
