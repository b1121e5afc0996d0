package audit_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/reviewledger/reviewledger/api/audit"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/eventstoretest"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/pgstore"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// TestTheWitnessCatchesARollBack: the signer archives every checkpoint to
// the witness directory; the database is then rolled back to how it was
// at checkpoint #1 (its checkpoints with it, as a restore from a backup
// would), which its own checkpoints cannot show. Verified against the
// witness, the report names exactly the reviews and checkpoints lost.
func TestTheWitnessCatchesARollBack(t *testing.T) {
	ctx := context.Background()
	pool := dbtest.Pool(t)
	store := pgstore.New(pool, pgstore.Config{})
	t.Cleanup(store.Close)
	l := ledger.New(store)
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	witness, err := audit.OpenDirArchive(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	checkpoints := audit.PGCheckpoints{Pool: pool}
	signer, err := audit.NewSigner(audit.SignerConfig{Key: key, Store: store, Histories: l, Checkpoints: checkpoints,
		Archive: witness, Registerer: reg, Now: func() time.Time { return t0 }, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	checkpoint := func(seq int64) {
		t.Helper()
		if res, err := signer.Checkpoint(ctx); err != nil || !res.New || res.Checkpoint.Seq != seq {
			t.Fatalf("checkpoint #%d: %+v %v", seq, res, err)
		}
	}

	sample(t, l, "kept")
	grown := (&script{t: t, l: l}).submit("grown", "caption_suggestion", at(0)).attempt(at(5))
	eventstoretest.WaitReadable(t, store, 11+1) // and the policy snapshot the reviews name
	checkpoint(1)
	grown.timeout(1, domain.ClassDeadlineExceeded, at(10005))
	sample(t, l, "new")
	eventstoretest.WaitReadable(t, store, 21+1)
	checkpoint(2)
	sample(t, l, "newer")
	eventstoretest.WaitReadable(t, store, 30+1)
	checkpoint(3)
	if got, err := witness.Last(ctx); err != nil || got != 3 || metric(t, reg, "reviewledger_audit_witness_last_seq") != 3 {
		t.Fatalf("witness holds up to #%d (%v), want #3", got, err)
	}

	// A copy of the witness taken before #3 was shipped: intact, #3 not
	// witnessed.
	all, err := witness.All(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stale := audit.DirArchive{Dir: t.TempDir()}
	for _, st := range all[:2] {
		if err := stale.Put(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	staleV := &audit.Verifier{Store: store, Histories: l, Checkpoints: checkpoints, PublicKeys: []ed25519.PublicKey{pub}, Archive: stale}
	if rep, err := staleV.Verify(ctx, ""); err != nil || rep.Err() != nil || rep.Archived != 2 || rep.Unwitnessed != 1 {
		t.Fatalf("a stale copy of the witness: %+v %v %v, want intact with 1 checkpoint not witnessed", rep, err, rep.Err())
	}

	// Roll back to checkpoint #1.
	for _, sql := range []string{
		`DELETE FROM event WHERE stream IN ('review-new', 'review-newer') OR (stream = 'review-grown' AND revision > 1)`,
		`DELETE FROM audit_checkpoint WHERE seq > 1`,
		`DELETE FROM audit_signed_head WHERE seq > 1`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	own := &audit.Verifier{Store: store, Histories: l, Checkpoints: checkpoints, PublicKeys: []ed25519.PublicKey{pub}}
	if rep, err := own.Verify(ctx, ""); err != nil || rep.Err() != nil {
		t.Fatalf("the database's own checkpoints were expected to be fooled: %+v %v %v", rep, err, rep.Err())
	}
	v := &audit.Verifier{Store: store, Histories: l, Checkpoints: checkpoints, PublicKeys: []ed25519.PublicKey{pub}, Archive: witness}
	rep, err := v.Verify(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := audit.DamagedIDs(rep.Damaged); !slices.Equal(got, []string{"grown", "new", "newer"}) || len(rep.Damaged) != 3 {
		t.Fatalf("damaged %v, want grown, new and newer once each:\n%v", got, rep.Err())
	}
	if !slices.Equal(rep.Lost, []int64{2, 3}) || rep.Archived != 3 || !errors.Is(rep.Err(), audit.ErrDamaged) {
		t.Fatalf("lost %v, archived %d, want #2 and #3 of 3", rep.Lost, rep.Archived)
	}
	msg := rep.Err().Error()
	for _, want := range []string{
		"review grown: revision 2: events after revision 1 removed (signed checkpoint #2 in the " + witness.Name() + " saw revision 2)",
		"review new: revision 0: every event removed (signed checkpoint #2 in the " + witness.Name() + " saw revision 8)",
		"review newer: revision 0: every event removed (signed checkpoint #3 in the " + witness.Name() + " saw revision 8)",
		"checkpoint #2: in the " + witness.Name() + " but not in the database (restored to an earlier point, or removed); it signed 2 reviews",
		"checkpoint #3: in the " + witness.Name() + " but not in the database",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("report lacks %q:\n%s", want, msg)
		}
	}
	if one, err := v.Verify(ctx, "newer"); err != nil || !slices.Equal(audit.DamagedIDs(one.Damaged), []string{"newer"}) ||
		!slices.Equal(one.Lost, []int64{3}) {
		t.Fatalf("--review newer: %+v %v", one, err)
	}
	if one, err := v.Verify(ctx, "kept"); err != nil || one.Err() != nil {
		t.Fatalf("--review kept: %+v %v %v", one, err, one.Err())
	}

	// Signing on from the rolled-back database makes a second #2: the
	// witness refuses it, the signer counts the failure, and the
	// database's checkpoint stays stored.
	sample(t, l, "after")
	eventstoretest.WaitReadable(t, store, 20+1)
	checkpoint(2)
	if n := metric(t, reg, "reviewledger_audit_witness_failures_total"); n != 1 {
		t.Fatalf("%v witness failures, want 1", n)
	}
	rep, _ = v.Verify(ctx, "")
	if msg := strings.Join(rep.Broken, "\n"); !strings.Contains(msg, "checkpoint #2: the database holds another checkpoint under this seq than the "+witness.Name()) ||
		rep.Unwitnessed != 0 {
		t.Fatalf("a second #2: broken:\n%s", msg)
	}

	// A witness file altered after it was written is named.
	file := filepath.Join(witness.Dir, "00000000000000000001.checkpoint")
	held, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(file, 0o640); err != nil { // archived files are read-only
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(strings.Replace(string(held), "head kept 8", "head kept 7", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	rep, _ = v.Verify(ctx, "")
	if msg := strings.Join(rep.Broken, "\n"); !strings.Contains(msg, "checkpoint #1 in the "+witness.Name()+": the signature does not verify (altered)") {
		t.Fatalf("an altered witness file: broken:\n%s", msg)
	}
	if err := os.WriteFile(file, held, 0o644); err != nil {
		t.Fatal(err)
	}

	// A key the auditor does not know is named for the witness's files too.
	other, _, _ := ed25519.GenerateKey(rand.Reader)
	wrong := &audit.Verifier{Store: store, Histories: l, Checkpoints: checkpoints, PublicKeys: []ed25519.PublicKey{other}, Archive: witness}
	rep, _ = wrong.Verify(ctx, "")
	if msg := strings.Join(rep.Broken, "\n"); !strings.Contains(msg, "checkpoint #1 in the "+witness.Name()+": signed with key "+signer.KeyID()+", which is not among the public keys given") {
		t.Fatalf("another key: broken:\n%s", msg)
	}
}

// metric reads a gauge or counter from reg.
func metric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			m := f.GetMetric()[0]
			return m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
