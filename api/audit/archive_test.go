package audit_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/reviewledger/reviewledger/api/audit"
)

// signedChain signs n chained checkpoints with key.
func signedChain(t *testing.T, key ed25519.PrivateKey, n int) []audit.Stored {
	t.Helper()
	pub, _ := key.Public().(ed25519.PublicKey)
	var (
		out  []audit.Stored
		prev string
	)
	for seq := int64(1); seq <= int64(n); seq++ {
		c := audit.Checkpoint{Seq: seq, SignedAt: at(int(seq)), KeyID: audit.KeyID(pub), Prev: prev,
			Heads: []audit.Head{{ReviewID: "r" + string(rune('a'+seq%26)), Revision: uint64(seq), Hash: "ab", Digest: "cd"}}}
		body, sig := audit.Sign(c, key)
		out = append(out, audit.Stored{Seq: seq, Body: body, Signature: sig})
		prev = audit.Digest(body)
	}
	return out
}

func TestDirArchive(t *testing.T) {
	ctx := context.Background()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	a, err := audit.OpenDirArchive(dir)
	if err != nil {
		t.Fatal(err)
	}
	if last, err := a.Last(ctx); err != nil || last != 0 {
		t.Fatalf("empty archive: last %d, %v", last, err)
	}
	chain := signedChain(t, key, 12)
	// Put out of order; read back in seq order (12 after 9: the names are
	// zero-padded).
	for _, i := range []int{11, 0, 8, 1, 2, 3, 4, 5, 6, 7, 9, 10} {
		if err := a.Put(ctx, chain[i]); err != nil {
			t.Fatal(err)
		}
	}
	all, err := a.All(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(all, chain, func(x, y audit.Stored) bool {
		return x.Seq == y.Seq && string(x.Body) == string(y.Body) && string(x.Signature) == string(y.Signature)
	}) {
		t.Fatalf("read back %d checkpoints, not the 12 put in seq order", len(all))
	}
	if last, err := a.Last(ctx); err != nil || last != 12 {
		t.Fatalf("last %d, %v, want 12", last, err)
	}
	file := filepath.Join(dir, "00000000000000000003.checkpoint")
	held, err := os.ReadFile(file)
	if err != nil || !strings.HasPrefix(string(held), string(chain[2].Body)) || !strings.Contains(string(held), "\nsignature ") {
		t.Fatalf("%s: %q %v, want the body then the signature", file, held, err)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o440 {
		t.Fatalf("%s: mode %v %v, want 0440", file, fi.Mode(), err)
	}

	// Putting the same again is a retry; a different one is refused and the
	// file stays.
	if err := a.Put(ctx, chain[2]); err != nil {
		t.Fatalf("idempotent put: %v", err)
	}
	other := signedChain(t, key, 3)[2]
	other.Body = []byte(strings.Replace(string(other.Body), "head rd 3", "head rd 4", 1))
	if err := a.Put(ctx, other); !errors.Is(err, audit.ErrArchiveConflict) || !strings.Contains(err.Error(), file) {
		t.Fatalf("conflicting put: %v, want ErrArchiveConflict naming %s", err, file)
	}
	if again, _ := os.ReadFile(file); string(again) != string(held) {
		t.Fatal("a conflicting put changed the file")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 12 {
		t.Fatalf("%d entries, want the 12 checkpoints and no temporary file left", len(entries))
	}

	// A file that is not what it should be is named.
	for name, content := range map[string]string{
		"00000000000000000004.checkpoint": "reviewledger audit checkpoint v1\nseq 4\n",
		"00000000000000000005.checkpoint": string(chain[5].Body) + "signature " + "AAAA\n", // #6's body under #5's name
		"00000000000000000006.checkpoint": string(chain[5].Body) + "signature !!\n",
	} {
		t.Run(name, func(t *testing.T) {
			bad := t.TempDir()
			if err := os.WriteFile(filepath.Join(bad, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := audit.DirArchive{Dir: bad}.All(ctx)
			if !errors.Is(err, audit.ErrBadCheckpoint) || !strings.Contains(err.Error(), filepath.Join(bad, name)) {
				t.Fatalf("All: %v, want ErrBadCheckpoint naming the file", err)
			}
		})
	}

	// Opening refuses what is not a writable directory.
	if _, err := audit.OpenDirArchive(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("a missing directory was accepted")
	}
	if _, err := audit.OpenDirArchive(file); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("a file: %v", err)
	}
}
