package audit_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/api/audit"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/eventstoretest"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/pgstore"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// rechainSQL recomputes a review stream's hash chain in SQL from its
// revision 0, as a database administrator who read ledger/chain.go could:
// each hash is SHA-256 over the length-prefixed previous hash (hex),
// stream, revision, type, actor and body, stored in the binary metadata of
// schema 4 (ledger/binarymeta.go): a mark byte, the schema in one byte, the
// hash's 32 bytes, the actor's length in one byte, the actor.
const rechainSQL = `DO $$
DECLARE
	r    record;
	prev text := '';
	h    bytea;
BEGIN
	FOR r IN SELECT revision, type, data, metadata AS meta FROM event
		WHERE stream = '%[1]s' ORDER BY revision
	LOOP
		h := sha256(
			pg_temp.part(convert_to(prev, 'UTF8')) || pg_temp.part(convert_to('%[1]s', 'UTF8')) ||
			pg_temp.part(convert_to(r.revision::text, 'UTF8')) || pg_temp.part(convert_to(r.type, 'UTF8')) ||
			pg_temp.part(substring(r.meta from 36 for get_byte(r.meta, 34))) || pg_temp.part(r.data));
		UPDATE event SET metadata = overlay(r.meta placing h from 3 for 32)
			WHERE stream = '%[1]s' AND revision = r.revision;
		prev := encode(h, 'hex');
	END LOOP;
END
$$`

// hexHashSQL is the hex hash of event e from its binary metadata.
const hexHashSQL = `encode(substring(e.metadata from 3 for 32), 'hex')`

// TestSignedCheckpointsCatchWhatTheDatabaseAdministratorRewrites: a review
// rewritten in SQL, with its hash chain and its audit anchor recomputed,
// passes every unsigned check; the signed checkpoints still name it, and
// every other change to what auditors see.
func TestSignedCheckpointsCatchWhatTheDatabaseAdministratorRewrites(t *testing.T) {
	ctx := context.Background()
	pool := dbtest.Pool(t)
	store := pgstore.New(pool, pgstore.Config{})
	t.Cleanup(store.Close)
	l := ledger.New(store)
	for _, id := range []string{"a", "rewritten", "retimed", "kept"} {
		sample(t, l, id)
	}
	eventstoretest.WaitReadable(t, store, 36+1) // 4 reviews of 9 events, and the policy snapshot they name

	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	checkpoints := audit.PGCheckpoints{Pool: pool}
	signer, err := audit.NewSigner(audit.SignerConfig{Key: key, Store: store, Histories: l, Checkpoints: checkpoints,
		Now: func() time.Time { return t0 }, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	res, err := signer.Checkpoint(ctx)
	if err != nil || !res.New || res.Checkpoint.Seq != 1 || len(res.Checkpoint.Heads) != 4 || res.Checkpoint.Prev != "" {
		t.Fatalf("first checkpoint: %+v, %v", res, err)
	}
	if again, err := signer.Checkpoint(ctx); err != nil || again.New || again.Checkpoint.Seq != 1 {
		t.Fatalf("nothing grew: %+v, %v, want checkpoint 1 again and nothing new", again, err)
	}

	anchors := audit.PGAnchors{Pool: pool}
	unsigned := &audit.Verifier{Store: store, Histories: l, Anchors: anchors, Now: func() time.Time { return t0 }}
	signed := &audit.Verifier{Store: store, Histories: l, Checkpoints: checkpoints, PublicKeys: []ed25519.PublicKey{pub}}
	rep, err := signed.Verify(ctx, "")
	if err != nil || rep.Err() != nil || rep.Checkpoints != 1 || rep.Unsigned != 0 || rep.Latest == nil || rep.Latest.Seq != 1 {
		t.Fatalf("intact, signed: %+v %v %v", rep, err, rep.Err())
	}
	if rep, err := unsigned.Verify(ctx, ""); err != nil || rep.Err() != nil || rep.Anchored != 4 {
		t.Fatalf("intact, anchored: %+v %v", rep, err)
	}

	// A review written after the checkpoint is not signed yet, then is, in
	// a checkpoint chained onto the first.
	sample(t, l, "later")
	eventstoretest.WaitReadable(t, store, 45+1)
	if rep, err := signed.Verify(ctx, ""); err != nil || rep.Err() != nil || rep.Unsigned != 9 {
		t.Fatalf("a review after the checkpoint: %+v %v, want its 9 events unsigned", rep, err)
	}
	res, err = signer.Checkpoint(ctx)
	if err != nil || !res.New || res.Checkpoint.Seq != 2 || len(res.Checkpoint.Heads) != 1 || res.Checkpoint.Heads[0].ReviewID != "later" {
		t.Fatalf("second checkpoint: %+v, %v", res, err)
	}
	if _, err := unsigned.Verify(ctx, ""); err != nil {
		t.Fatal(err)
	}

	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// The administrator rewrites a decision, recomputes the chain and the
	// anchor, and moves another review's event in time (recorded_at is
	// outside the chain).
	exec(`CREATE FUNCTION pg_temp.part(x bytea) RETURNS bytea LANGUAGE sql AS $$ SELECT convert_to(length(x)::text || ':', 'UTF8') || x $$`)
	exec(`UPDATE event SET data = convert_to(replace(convert_from(data, 'UTF8'), '"rejected"', '"accepted"'), 'UTF8')
		WHERE stream = 'review-rewritten' AND revision = 8`)
	exec(strings.ReplaceAll(rechainSQL, "%[1]s", "review-rewritten"))
	forgeAnchor(t, pool, "rewritten")
	exec(`UPDATE event SET recorded_at = recorded_at - interval '1 hour' WHERE stream = 'review-retimed' AND revision = 3`)
	// The signer's own index is no witness: rewriting it changes nothing.
	exec(`UPDATE audit_signed_head s SET hash = ` + hexHashSQL + `
		FROM event e WHERE s.review_id = 'rewritten' AND e.stream = 'review-rewritten' AND e.revision = s.revision`)

	h, err := l.History(ctx, "rewritten")
	if err != nil || h.Verify() != nil {
		t.Fatalf("the rewrite left a broken chain (%v, %v): the test does not forge what it means to", err, h.Verify())
	}
	if rv, _ := h.Snapshot(); rv.State() != domain.StateAccepted {
		t.Fatalf("rewritten review is %s, want the forged accepted", rv.State())
	}
	rep, err = unsigned.Verify(ctx, "")
	if err != nil || rep.Err() != nil {
		t.Fatalf("the unsigned checks were expected to be fooled: %+v %v %v", rep, err, rep.Err())
	}

	rep, err = signed.Verify(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := audit.DamagedIDs(rep.Damaged); !slices.Equal(got, []string{"retimed", "rewritten"}) {
		t.Fatalf("damaged %v, want retimed and rewritten\n%v", got, rep.Err())
	}
	msg := rep.Err().Error()
	for _, want := range []string{
		"review rewritten: revision 8: history rewritten: the event at revision 8 no longer has the hash",
		"(signed checkpoint #1)",
		"review retimed: revision 8: recorded_at, request_id or schema of an event up to revision 8 altered (signed checkpoint #1)",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("report lacks %q:\n%s", want, msg)
		}
	}
	if one, err := signed.Verify(ctx, "rewritten"); err != nil || !slices.Equal(audit.DamagedIDs(one.Damaged), []string{"rewritten"}) {
		t.Fatalf("--review rewritten: %+v %v", one, err)
	}

	// The signer does not sign on top of the rewrite.
	sc := &script{t: t, l: l}
	sc.submit("pending", "caption_suggestion", at(0)).attempt(at(5))
	eventstoretest.WaitReadable(t, store, 47+1)
	if res, err := signer.Checkpoint(ctx); err != nil || !res.New || len(res.Checkpoint.Heads) != 1 || len(res.Refused) != 0 {
		t.Fatalf("third checkpoint: %+v %v", res, err)
	}
	exec(`UPDATE event SET recorded_at = recorded_at + interval '1 minute' WHERE stream = 'review-pending' AND revision = 0`)
	sc.timeout(1, domain.ClassDeadlineExceeded, at(10005))
	eventstoretest.WaitReadable(t, store, 48+1)
	res, err = signer.Checkpoint(ctx)
	if err != nil || res.New || !slices.Equal(res.Refused, []string{"pending"}) {
		t.Fatalf("a grown review whose signed part was altered: %+v %v, want it refused", res, err)
	}

	// Checkpoints themselves: an altered body, a removed one.
	exec(`UPDATE audit_checkpoint SET body = convert_to(replace(convert_from(body, 'UTF8'), 'head kept 8', 'head kept 7'), 'UTF8') WHERE seq = 1`)
	rep, _ = signed.Verify(ctx, "")
	if msg := strings.Join(rep.Broken, "\n"); !strings.Contains(msg, "checkpoint #1: the signature does not verify (altered)") || rep.Checkpoints != 2 {
		t.Fatalf("altered checkpoint: %d verified, broken:\n%s", rep.Checkpoints, msg)
	}
	exec(`DELETE FROM audit_checkpoint WHERE seq = 2`)
	rep, _ = signed.Verify(ctx, "")
	if msg := strings.Join(rep.Broken, "\n"); !strings.Contains(msg, "checkpoint #3: checkpoints #2 to #2 are missing (removed)") {
		t.Fatalf("removed checkpoint: broken:\n%s", msg)
	}
	exec(`DELETE FROM audit_checkpoint`)
	rep, _ = signed.Verify(ctx, "")
	if rep.Err() == nil || !strings.Contains(strings.Join(rep.Broken, "\n"), "no signed checkpoint is stored") {
		t.Fatalf("every checkpoint removed: %+v", rep)
	}

	// A key the auditor does not know.
	other, _, _ := ed25519.GenerateKey(rand.Reader)
	wrongKey := &audit.Verifier{Store: store, Histories: l, Checkpoints: checkpoints, PublicKeys: []ed25519.PublicKey{other}}
	exec(`DELETE FROM audit_signed_head`)
	if _, err := signer.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	rep, _ = wrongKey.Verify(ctx, "")
	if msg := strings.Join(rep.Broken, "\n"); !strings.Contains(msg, "signed with key "+signer.KeyID()+", which is not among the public keys given") {
		t.Fatalf("another key: broken:\n%s", msg)
	}
}

// forgeAnchor moves the anchor of review id to the hash of its stream's
// last event, as an administrator who rewrote its history and its chain
// would: the hash from the binary metadata (schema 4: a mark byte, the
// schema in one byte, the hash's 32 bytes, …).
func forgeAnchor(t *testing.T, pool *pgxpool.Pool, id string) {
	t.Helper()
	ctx := context.Background()
	var m audit.Mark
	err := pool.QueryRow(ctx, `SELECT revision, encode(substring(metadata from 3 for 32), 'hex') FROM event
		WHERE stream = $1 ORDER BY revision DESC LIMIT 1`, "review-"+id).Scan(&m.Revision, &m.Hash)
	if err != nil {
		t.Fatal(err)
	}
	if err := (audit.PGAnchors{Pool: pool}).Advance(ctx, map[string]audit.Mark{id: m}, time.Now()); err != nil {
		t.Fatal(err)
	}
}
