package httpapi

import (
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/reviewledger/reviewledger/api/contentaccess"
	"github.com/reviewledger/reviewledger/api/engine"
	"github.com/reviewledger/reviewledger/domain"
)

// HeaderPayloadDigest carries the served content's digest as the ledger
// records it ("sha256:<hex>"), so a client can check that what it shows is
// what was reviewed. Repr-Digest (RFC 9530) carries the same digest.
const HeaderPayloadDigest = "X-Payload-Digest"

// contentSecurityPolicy keeps served content inert should a browser open
// it directly: no scripts, no subresources, a unique origin.
const contentSecurityPolicy = "default-src 'none'; sandbox"

// getContent is GET /v1/reviews/{id}/content: the content submitted for
// review, for the moderators who decide on it. It is served only when its
// bytes hash to the ledger's digest; every read is logged (never the
// content) and counted, and recorded in the content-access record before
// a byte is sent: a read that cannot be recorded is not served.
func (s *Server) getContent(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	if s.deps.Content == nil {
		return fmt.Errorf("review content: no content store configured: %w", ErrNotReady)
	}
	if s.deps.ContentAccess == nil {
		return fmt.Errorf("review content: no content-access record configured: %w", ErrNotReady)
	}
	ctx := c.Request().Context()
	who := principal(c)
	contentType, content, digest, err := s.deps.Content.Content(ctx, id)
	outcome := "served"
	switch {
	case errors.Is(err, engine.ErrContentPurged):
		outcome = "purged"
	case errors.Is(err, domain.ErrReviewNotFound):
		outcome = "not_found"
	case errors.Is(err, engine.ErrContentMismatch):
		outcome = "mismatch"
	case err != nil:
		return err
	case engine.Digest(content) != digest:
		outcome = "mismatch"
		err = fmt.Errorf("review %q: content read does not hash to %s: %w", id, digest, engine.ErrContentMismatch)
	}
	if outcome == "served" || outcome == "purged" {
		if rerr := s.deps.ContentAccess.Record(ctx, contentaccess.Access{
			ReviewID: id, At: s.cfg.Now().UTC(), Subject: who.Subject, DisplayName: who.DisplayName, Actor: who.Name,
			Role: string(who.Role), Via: who.Via, Credential: who.Credential, RequestID: requestID(c), Outcome: outcome,
		}); rerr != nil {
			s.metrics.content.WithLabelValues(string(who.Role), "unrecorded").Inc()
			return fmt.Errorf("review %q: content not served, its read could not be recorded: %w", id, rerr)
		}
	}
	s.metrics.content.WithLabelValues(string(who.Role), outcome).Inc()
	if outcome == "served" || outcome == "purged" {
		s.log.LogAttrs(ctx, slog.LevelInfo, "review content read",
			slog.String("request_id", requestID(c)),
			slog.String("actor", who.Name),
			slog.String("role", string(who.Role)),
			slog.String("review_id", id),
			slog.String("outcome", outcome),
			slog.Int("bytes", len(content)))
	}
	if err != nil {
		return err // a mismatch is a 500, logged with the request ID
	}
	mediaType := servedMediaType(contentType)
	h := c.Response().Header()
	h.Set(echo.HeaderCacheControl, "no-store")
	h.Set(echo.HeaderXContentTypeOptions, "nosniff")
	h.Set(echo.HeaderContentSecurityPolicy, contentSecurityPolicy)
	h.Set(echo.HeaderContentDisposition, contentDisposition(mediaType, id))
	h.Set(HeaderPayloadDigest, digest)
	if rd, ok := reprDigest(digest); ok {
		h.Set("Repr-Digest", rd)
	}
	return c.Blob(http.StatusOK, mediaType, content)
}

// servedMediaType is the submitted content type, normalised, when it is a
// valid type/subtype media type; application/octet-stream otherwise.
func servedMediaType(contentType string) string {
	const fallback = echo.MIMEOctetStream
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		return fallback
	}
	typ, sub, ok := strings.Cut(mt, "/")
	if !ok || typ == "" || sub == "" || strings.Contains(sub, "/") {
		return fallback
	}
	formatted := mime.FormatMediaType(mt, params)
	if formatted == "" {
		return fallback
	}
	return formatted
}

// contentDisposition shows text inline and offers anything else as a
// download. Review IDs hold only A-Z a-z 0-9 . _ : - , so the file name
// needs no escaping; ':' is replaced for file systems that refuse it.
func contentDisposition(mediaType, reviewID string) string {
	if strings.HasPrefix(mediaType, "text/") {
		return "inline"
	}
	return fmt.Sprintf(`attachment; filename="%s.bin"`, strings.ReplaceAll(reviewID, ":", "_"))
}

// reprDigest renders "sha256:<hex>" as an RFC 9530 Repr-Digest field
// value: sha-256=:<base64>:.
func reprDigest(digest string) (string, bool) {
	hexSum, ok := strings.CutPrefix(digest, "sha256:")
	if !ok {
		return "", false
	}
	sum, err := hex.DecodeString(hexSum)
	if err != nil {
		return "", false
	}
	return "sha-256=:" + base64.StdEncoding.EncodeToString(sum) + ":", true
}
