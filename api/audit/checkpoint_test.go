package audit_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/api/audit"
	"github.com/reviewledger/reviewledger/eventstore"
)

func TestCheckpointBody(t *testing.T) {
	c := audit.Checkpoint{
		Seq: 2, SignedAt: time.Date(2026, 12, 1, 10, 0, 0, 123456000, time.UTC), KeyID: "3f9a0c1d2e4b5a69",
		Prev: strings.Repeat("ab", 32), Position: eventstore.Position{Commit: 5829, Prepare: 17},
		Heads: []audit.Head{{ReviewID: "r-1", Revision: 4, Hash: "9b1c", Digest: "07aa"}, {ReviewID: "r-2", Revision: 7, Hash: "11", Digest: "22"}},
	}
	want := "reviewledger audit checkpoint v1\nseq 2\nsigned_at 2026-12-01T10:00:00.123456Z\nkey 3f9a0c1d2e4b5a69\nprev " + strings.Repeat("ab", 32) +
		"\nposition 5829/17\nhead r-1 4 9b1c 07aa\nhead r-2 7 11 22\n"
	if got := string(c.Body()); got != want {
		t.Fatalf("body:\n%s\nwant:\n%s", got, want)
	}
	back, err := audit.ParseCheckpoint(c.Body())
	if err != nil || !bytes.Equal(back.Body(), c.Body()) {
		t.Fatalf("round trip: %v\n%s", err, back.Body())
	}
	first := audit.Checkpoint{Seq: 1, SignedAt: c.SignedAt, KeyID: "k"}
	if b := first.Body(); !bytes.Contains(b, []byte("\nprev none\n")) {
		t.Fatalf("first checkpoint: %s", b)
	}
	for name, body := range map[string]string{
		"another format": strings.Replace(want, "v1", "v2", 1),
		"seq zero":       strings.Replace(want, "seq 2", "seq 0", 1),
		"not canonical":  strings.Replace(want, "head r-1 4", "head r-1 04", 1),
		"out of order":   strings.Replace(strings.Replace(want, "r-1", "r-9", 1), "r-2", "r-1", 1),
		"bad review ID":  strings.Replace(want, "r-1", "r/1", 1),
		"short head":     strings.Replace(want, " 07aa", "", 1),
	} {
		if _, err := audit.ParseCheckpoint([]byte(body)); !errors.Is(err, audit.ErrBadCheckpoint) {
			t.Errorf("%s: %v, want ErrBadCheckpoint", name, err)
		}
	}
}

func TestKeyFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.key")
	id, err := audit.WriteKeyPair(path)
	if err != nil {
		t.Fatal(err)
	}
	priv, err := audit.LoadPrivateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := audit.LoadPublicKey(path + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	if !pub.Equal(priv.Public()) || audit.KeyID(pub) != id || len(id) != 16 {
		t.Fatalf("the public key does not belong to the signing key (id %q)", id)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("signing key mode %v (%v), want 0600", fi.Mode(), err)
	}
	if _, err := audit.WriteKeyPair(path); err == nil {
		t.Fatal("an existing key was replaced")
	}
	if _, err := audit.LoadPrivateKey(path + ".pub"); !errors.Is(err, audit.ErrBadKey) || !strings.Contains(err.Error(), "audit.key.pub") {
		t.Fatalf("a public key read as a signing key: %v", err)
	}
	if _, err := audit.LoadPublicKey(path); !errors.Is(err, audit.ErrBadKey) {
		t.Fatalf("a signing key read as a public key: %v", err)
	}
	// The body's signature verifies with the public key only.
	c := audit.Checkpoint{Seq: 1, SignedAt: t0, KeyID: id}
	body, sig := audit.Sign(c, priv)
	other, _, _ := ed25519.GenerateKey(rand.Reader)
	if !ed25519.Verify(pub, body, sig) || ed25519.Verify(other, body, sig) {
		t.Fatal("signature")
	}
}
