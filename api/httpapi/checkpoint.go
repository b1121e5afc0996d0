package httpapi

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/reviewledger/reviewledger/api/audit"
)

// Checkpoints signs audit checkpoints on demand (*audit.Signer).
type Checkpoints interface {
	// Checkpoint signs, chained onto the latest checkpoint, the heads of
	// the reviews that grew since it, and stores the new checkpoint; with
	// nothing new it returns the latest (New false).
	Checkpoint(ctx context.Context) (audit.Signed, error)
}

var _ Checkpoints = (*audit.Signer)(nil)

// checkpointView is the body of POST /v1/audit/checkpoints: the checkpoint
// as signed, for an auditor to keep where the database's writers cannot
// reach it.
type checkpointView struct {
	Seq        int64     `json:"seq"`
	SignedAt   time.Time `json:"signed_at"`
	KeyID      string    `json:"key_id"`
	Digest     string    `json:"digest"`
	PrevDigest string    `json:"prev_digest"`
	Heads      int       `json:"heads"`
	New        bool      `json:"new"`
	Refused    []string  `json:"refused"`
	Body       string    `json:"body"`
	Signature  string    `json:"signature"`
}

// checkpoint is POST /v1/audit/checkpoints (an extension): sign a
// checkpoint now. 201 with the new checkpoint, 200 with the latest when no
// review grew since it (seq 0 when none was ever signed); 503 when the
// server has no signing key.
func (s *Server) checkpoint(c echo.Context) error {
	if s.deps.Checkpoints == nil {
		return fmt.Errorf("audit checkpoints: this server signs none (REVIEWLEDGER_AUDIT_SIGNING_KEY is unset): %w", ErrNotReady)
	}
	res, err := s.deps.Checkpoints.Checkpoint(c.Request().Context())
	if err != nil {
		return err
	}
	cp := res.Checkpoint
	v := checkpointView{Seq: cp.Seq, KeyID: cp.KeyID, PrevDigest: cp.Prev, Heads: len(cp.Heads), New: res.New, Refused: res.Refused}
	if v.Refused == nil {
		v.Refused = []string{}
	}
	if cp.Seq > 0 {
		body := cp.Body()
		v.SignedAt, v.Digest, v.Body = cp.SignedAt.UTC(), audit.Digest(body), string(body)
		v.Signature = base64.StdEncoding.EncodeToString(res.Signature)
	}
	status := http.StatusOK
	if res.New {
		status = http.StatusCreated
	}
	return c.JSON(status, v)
}
