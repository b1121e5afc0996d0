package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/api/audit"
	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
	"github.com/reviewledger/reviewledger/eventstore/eventstoretest"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

func TestAuditKeygen(t *testing.T) {
	setEnv(t, nil)
	path := filepath.Join(t.TempDir(), "audit.key")
	code, out, stderr := runCLI(t, context.Background(), "audit", "keygen", "--out", path)
	if code != 0 || !strings.Contains(out, "signing key (for serve, REVIEWLEDGER_AUDIT_SIGNING_KEY): "+path) {
		t.Fatalf("keygen: exit %d\n%s\n%s", code, out, stderr)
	}
	for _, p := range []string{path, path + ".pub"} {
		if _, err := os.Stat(p); err != nil {
			t.Fatal(err)
		}
	}
	if code, _, stderr := runCLI(t, context.Background(), "audit", "keygen", "--out", path); code != 1 || !strings.Contains(stderr, "--out") {
		t.Fatalf("keygen over an existing key: exit %d %q", code, stderr)
	}
	// serve refuses a file that is not a signing key, naming the setting.
	setEnv(t, map[string]string{"REVIEWLEDGER_AUDIT_SIGNING_KEY": path + ".pub"})
	if code, _, stderr := runCLI(t, context.Background(), "serve"); code != 2 || !strings.Contains(stderr, "REVIEWLEDGER_AUDIT_SIGNING_KEY: "+path+".pub") {
		t.Fatalf("serve with a public key as signing key: exit %d %q", code, stderr)
	}
	if code, _, stderr := runCLI(t, context.Background(), "audit", "verify", "--public-key", path); code != 2 || !strings.Contains(stderr, "--public-key") {
		t.Fatalf("verify with a signing key as public key: exit %d %q", code, stderr)
	}
	// The witness directory must be a writable directory, and is only
	// written with a signing key.
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"REVIEWLEDGER_AUDIT_WITNESS_DIR": t.TempDir()},
			"REVIEWLEDGER_AUDIT_WITNESS_DIR: needs REVIEWLEDGER_AUDIT_SIGNING_KEY"},
		{map[string]string{"REVIEWLEDGER_AUDIT_SIGNING_KEY": path, "REVIEWLEDGER_AUDIT_WITNESS_DIR": path + ".missing"},
			"REVIEWLEDGER_AUDIT_WITNESS_DIR: must be a writable directory"},
		{map[string]string{"REVIEWLEDGER_AUDIT_SIGNING_KEY": path, "REVIEWLEDGER_AUDIT_WITNESS_DIR": path},
			"REVIEWLEDGER_AUDIT_WITNESS_DIR: must be a writable directory: " + path + ": not a directory"},
	} {
		setEnv(t, tc.env)
		if code, _, stderr := runCLI(t, context.Background(), "serve"); code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("serve with %v: exit %d %q, want %q", tc.env, code, stderr, tc.want)
		}
	}
}

// TestServeSignsCheckpoints: serve with a signing key signs checkpoints,
// periodically and on demand; audit verify --public-key checks them and
// names a review rewritten with a valid chain and matching anchors, which
// the unsigned checks cannot.
func TestServeSignsCheckpoints(t *testing.T) {
	ctx := context.Background()
	dbURL := dbtest.URL(t)
	key := filepath.Join(t.TempDir(), "audit.key")
	setEnv(t, nil)
	if code, out, stderr := runCLI(t, ctx, "audit", "keygen", "--out", key); code != 0 {
		t.Fatalf("keygen: %d %s %s", code, out, stderr)
	}
	pool, store := openStore(t, dbURL)
	l := ledger.New(store)
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, id := range []string{"r1", "r2"} {
		writeReview(t, l, id, t0)
	}
	eventstoretest.WaitReadable(t, store, 10+1) // 2 reviews of 5 events, and the policy snapshot they name

	l0, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l0.Addr().String()
	l0.Close()
	const auditorToken = "auditor-token-0123456789"
	setEnv(t, map[string]string{"DATABASE_URL": dbURL, "REVIEWLEDGER_ADDR": addr,
		"REVIEWLEDGER_TOKENS":                    validEnv["REVIEWLEDGER_TOKENS"] + ",auditor:audrey:" + auditorToken,
		"REVIEWLEDGER_AUDIT_SIGNING_KEY":         key,
		"REVIEWLEDGER_AUDIT_CHECKPOINT_INTERVAL": "50ms"})
	serveCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan int, 1)
	var logs lockedBuffer
	go func() { done <- run(serveCtx, []string{"serve"}, &logs, &logs) }()
	// The periodic signer signs both reviews; asked again, the server has
	// nothing new to sign.
	var last struct {
		Seq   int64 `json:"seq"`
		Heads int   `json:"heads"`
		New   bool  `json:"new"`
	}
	clocktest.EventuallyShows(t, "serve to sign both reviews", func() (bool, string) {
		var count int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM audit_signed_head`).Scan(&count); err != nil && !strings.Contains(err.Error(), "does not exist") {
			t.Fatal(err)
		}
		if count == 2 {
			return true, ""
		}
		select {
		case code := <-done:
			t.Fatalf("serve exited %d:\n%s", code, logs.String())
		default:
		}
		return false, fmt.Sprintf("serve signed %d of 2 reviews:\n%s", count, logs.String())
	})
	req, _ := http.NewRequestWithContext(ctx, "POST", fmt.Sprintf("http://%s/v1/audit/checkpoints", addr), nil)
	req.Header.Set("Authorization", "Bearer "+auditorToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&last)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || last.New || last.Seq < 1 {
		t.Fatalf("on demand with nothing new: %d %+v %v", resp.StatusCode, last, err)
	}
	stop()
	if code := <-done; code != 0 {
		t.Fatalf("serve exited %d:\n%s", code, logs.String())
	}

	setEnv(t, map[string]string{"DATABASE_URL": dbURL})
	code, out, stderr := runCLI(t, ctx, "audit", "verify", "--public-key", key+".pub")
	if code != 0 || !strings.Contains(out, "2 reviews, 10 events checked: intact") ||
		!strings.Contains(out, fmt.Sprintf("verified, 0 broken; latest #%d signed", last.Seq)) || !strings.Contains(out, "0 events not yet signed") {
		t.Fatalf("verify: exit %d\n%s\n%s", code, out, stderr)
	}

	// Rewrite r2 with a valid chain (the last timeout now a different
	// classification) and move its anchor along.
	if _, err := pool.Exec(ctx, `DELETE FROM event WHERE stream = 'review-r2'`); err != nil {
		t.Fatal(err)
	}
	writeReview(t, l, "r2", t0.Add(time.Second))
	// The hash, from the binary metadata (schema 4: a mark byte, the
	// schema in one byte, the hash's 32 bytes, …).
	var m audit.Mark
	if err := pool.QueryRow(ctx, `SELECT revision, encode(substring(metadata from 3 for 32), 'hex') FROM event
		WHERE stream = 'review-r2' ORDER BY revision DESC LIMIT 1`).Scan(&m.Revision, &m.Hash); err != nil {
		t.Fatal(err)
	}
	if err := (audit.PGAnchors{Pool: pool}).Advance(ctx, map[string]audit.Mark{"r2": m}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if code, out, stderr := runCLI(t, ctx, "audit", "verify"); code != 0 {
		t.Fatalf("the unsigned checks were expected to be fooled: exit %d\n%s\n%s", code, out, stderr)
	}
	code, out, stderr = runCLI(t, ctx, "audit", "verify", "--public-key", key+".pub")
	if code != 1 || !strings.Contains(out, "DAMAGED review r2: revision 4: history rewritten") || strings.Contains(out, "review r1:") ||
		!strings.Contains(stderr, "1 of 2 reviews damaged") {
		t.Fatalf("verify after the rewrite: exit %d\n%s\n%s", code, out, stderr)
	}
}
