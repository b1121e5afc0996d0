package main

// A restore from a base backup, checked against the witness directory.

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
	"github.com/reviewledger/reviewledger/migrations/dbtest/cluster"
)

// damagedIn lists the review IDs and checkpoint seqs audit verify's
// output names as damaged, in order, once each.
func damagedIn(out string) (reviews []string, checkpoints []int64) {
	for _, m := range regexp.MustCompile(`(?m)^DAMAGED review (\S+):`).FindAllStringSubmatch(out, -1) {
		if !slices.Contains(reviews, m[1]) {
			reviews = append(reviews, m[1])
		}
	}
	for _, m := range regexp.MustCompile(`(?m)^DAMAGED checkpoint #(\d+): in the witness `).FindAllStringSubmatch(out, -1) {
		n, _ := strconv.ParseInt(m[1], 10, 64)
		checkpoints = append(checkpoints, n)
	}
	return reviews, checkpoints
}

// latestCheckpoint is the highest seq in a database's audit_checkpoint.
func latestCheckpoint(t *testing.T, dbURL string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var seq int64
	if err := conn.QueryRow(ctx, `SELECT coalesce(max(seq), 0) FROM audit_checkpoint`).Scan(&seq); err != nil {
		t.Fatal(err)
	}
	return seq
}

// TestE2ERestoreIsCheckedAgainstTheWitness: serve signs checkpoints into
// the database and the witness directory (REVIEWLEDGER_AUDIT_WITNESS_DIR).
// A base backup is taken; more reviews are decided (new ones, and one
// escalated before the backup) and signed. The backup restored to a new
// server passes every check of the database's own, but audit verify
// --witness names exactly the reviews decided after the backup and the
// checkpoints signed after it; the original passes.
func TestE2ERestoreIsCheckedAgainstTheWitness(t *testing.T) {
	t.Parallel()
	pg := cluster.Start(t)
	dbURL := pg.CreateDatabase("reviewledger")
	key := filepath.Join(t.TempDir(), "audit.key")
	if code, out, errOut := runBin(t, nil, "audit", "keygen", "--out", key); code != 0 {
		t.Fatalf("keygen: exit %d\n%s%s", code, out, errOut)
	}
	witness := t.TempDir()
	prov := newScriptedProvider(t)
	env := baseServeEnv(t, dbURL, prov.URL())
	env["REVIEWLEDGER_AUDIT_SIGNING_KEY"] = key
	env["REVIEWLEDGER_AUDIT_CHECKPOINT_INTERVAL"] = "200ms"
	env["REVIEWLEDGER_AUDIT_WITNESS_DIR"] = witness
	srv := startServe(t, env)
	prov.setTarget(srv.URL)

	escalate := func(id string) {
		t.Helper()
		prov.script(id, status(http.StatusBadRequest, ""))
		srv.submit(t, id, "e2e_fast", content(id))
		if v := srv.waitSettled(t, id); v.State != "manual_review" {
			t.Fatalf("%s: %+v, want manual_review", id, v)
		}
	}
	decide := func(id string) {
		t.Helper()
		v := srv.review(t, id)
		srv.expect(t, http.StatusOK, http.MethodPost, "/v1/reviews/"+id+"/decision", tokModerator,
			map[string]any{"state": "rejected", "note": "decided", "expected_version": v.Version})
	}
	verifyArgs := []string{"audit", "verify", "--no-anchor", "--public-key", key + ".pub", "--witness", witness}
	allSigned := func(what string) {
		t.Helper()
		clocktest.EventuallyShows(t, what, func() (bool, string) {
			code, out, errOut := srv.cli(t, verifyArgs...)
			return code == 0 && strings.Contains(out, "0 events not yet signed") && strings.Contains(out, "0 not in the database; 0 in the database not in the witness"), out + errOut
		})
	}

	for _, id := range []string{"before-1", "before-2"} {
		escalate(id)
		decide(id)
	}
	escalate("pending") // decided only after the backup
	allSigned("the reviews before the backup to be signed and witnessed")
	backup := pg.BaseBackup()
	atBackup := latestCheckpoint(t, dbURL)

	for _, id := range []string{"after-1", "after-2"} {
		escalate(id)
		decide(id)
	}
	decide("pending")
	allSigned("the reviews after the backup to be signed and witnessed")
	srv.stop(t)
	last := latestCheckpoint(t, dbURL)
	if last <= atBackup {
		t.Fatalf("no checkpoint after the backup's #%d", atBackup)
	}

	restored := backup.Restore()
	restoredEnv := map[string]string{"DATABASE_URL": restored.URL("reviewledger")}
	if got := latestCheckpoint(t, restoredEnv["DATABASE_URL"]); got < atBackup {
		t.Fatalf("the restored database holds checkpoints to #%d, the backup was taken at #%d", got, atBackup)
	}
	// The restored database's own checkpoints hold: it is consistent, only
	// older.
	if code, out, errOut := runBin(t, restoredEnv, "audit", "verify", "--no-anchor", "--public-key", key+".pub"); code != 0 {
		t.Fatalf("restored, without the witness: exit %d, want its own checks to pass\n%s%s", code, out, errOut)
	}
	fromRestore := latestCheckpoint(t, restoredEnv["DATABASE_URL"])
	code, out, errOut := runBin(t, restoredEnv, verifyArgs...)
	t.Logf("audit verify --witness on the restored database:\n%s%s", out, errOut)
	reviews, lost := damagedIn(out)
	var wantLost []int64
	for seq := fromRestore + 1; seq <= last; seq++ {
		wantLost = append(wantLost, seq)
	}
	slices.Sort(reviews)
	if code != 1 || !slices.Equal(reviews, []string{"after-1", "after-2", "pending"}) || !slices.Equal(lost, wantLost) ||
		!strings.Contains(errOut, "3 of 5 reviews damaged") {
		t.Fatalf("restored, with the witness: exit %d, damaged reviews %v (want after-1, after-2, pending), lost checkpoints %v (want %v)\n%s%s",
			code, reviews, lost, wantLost, out, errOut)
	}
	if !strings.Contains(out, "DAMAGED review pending: revision ") || !strings.Contains(out, "removed (signed checkpoint #") {
		t.Errorf("restored: the truncated review is not named as such:\n%s", out)
	}
	if code, out, errOut := runBin(t, restoredEnv, append(verifyArgs, "--review", "before-1")...); code != 0 {
		t.Errorf("restored, --review before-1: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, _ := runBin(t, restoredEnv, append(verifyArgs, "--review", "pending")...); code != 1 || !strings.Contains(out, "DAMAGED review pending:") {
		t.Errorf("restored, --review pending: exit %d\n%s", code, out)
	}

	// The original holds everything the witness signed.
	if code, out, errOut := runBin(t, map[string]string{"DATABASE_URL": dbURL}, verifyArgs...); code != 0 || !strings.Contains(out, "5 reviews") ||
		!strings.Contains(out, fmt.Sprintf("witness %s: %d checkpoints verified, 0 not in the database; 0 in the database not in the witness\n", witness, last)) {
		t.Fatalf("original, with the witness: exit %d\n%s%s", code, out, errOut)
	}
	// --witness is checked with the public keys only.
	if code, _, errOut := runBin(t, restoredEnv, "audit", "verify", "--witness", witness); code != 2 || !strings.Contains(errOut, "--witness: needs --public-key") {
		t.Fatalf("--witness without --public-key: exit %d %q", code, errOut)
	}
}
