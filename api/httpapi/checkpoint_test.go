package httpapi

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"net/http"
	"testing"

	"github.com/reviewledger/reviewledger/api/audit"
)

// fakeSigner signs with a fixed key; each call is one round.
type fakeSigner struct {
	key    ed25519.PrivateKey
	rounds []audit.Signed
}

func (f *fakeSigner) Checkpoint(context.Context) (audit.Signed, error) {
	res := f.rounds[0]
	f.rounds = f.rounds[1:]
	if res.Checkpoint.Seq > 0 {
		_, res.Signature = audit.Sign(res.Checkpoint, f.key)
	}
	return res, nil
}

func TestAuditCheckpointRoute(t *testing.T) {
	key := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	pub, _ := key.Public().(ed25519.PublicKey)
	cp := audit.Checkpoint{Seq: 4, SignedAt: t0, KeyID: audit.KeyID(pub), Prev: "ab",
		Heads: []audit.Head{{ReviewID: "r1", Revision: 2, Hash: "h", Digest: "d"}}}
	signer := &fakeSigner{key: key, rounds: []audit.Signed{
		{Checkpoint: cp, New: true, Refused: []string{"r9"}},
		{Checkpoint: cp},
		{},
	}}
	h := newHarness(t, func(_ *Config, d *Deps) { d.Checkpoints = signer })

	rec := h.do("POST", "/v1/audit/checkpoints", auditorToken, "")
	if rec.Code != http.StatusCreated {
		t.Fatalf("new checkpoint: %d %s", rec.Code, rec.Body)
	}
	v := decode[checkpointView](t, rec)
	sig, err := base64.StdEncoding.DecodeString(v.Signature)
	if err != nil || v.Seq != 4 || !v.New || v.Heads != 1 || v.Digest != audit.Digest([]byte(v.Body)) || v.PrevDigest != "ab" ||
		len(v.Refused) != 1 || !ed25519.Verify(pub, []byte(v.Body), sig) {
		t.Fatalf("view %+v (%v)", v, err)
	}
	if back, err := audit.ParseCheckpoint([]byte(v.Body)); err != nil || back.Seq != 4 {
		t.Fatalf("body does not parse: %v", err)
	}
	if rec := h.do("POST", "/v1/audit/checkpoints", adminToken, ""); rec.Code != http.StatusOK || decode[checkpointView](t, rec).New {
		t.Fatalf("nothing new: %d %s", rec.Code, rec.Body)
	}
	if rec := h.do("POST", "/v1/audit/checkpoints", auditorToken, ""); rec.Code != http.StatusOK || decode[checkpointView](t, rec).Seq != 0 {
		t.Fatalf("none ever signed: %d %s", rec.Code, rec.Body)
	}
	wantProblem(t, h.do("POST", "/v1/audit/checkpoints", moderatorToken, ""), http.StatusForbidden, "forbidden", "")

	unsigned := newHarness(t)
	wantProblem(t, unsigned.do("POST", "/v1/audit/checkpoints", auditorToken, ""), http.StatusServiceUnavailable, "not-ready", "")
}
