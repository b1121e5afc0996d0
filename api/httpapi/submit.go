package httpapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/reviewledger/reviewledger/api/engine"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

// submitBody is the JSON body of POST /v1/reviews.
type submitBody struct {
	ReviewID     string          `json:"review_id"`
	ContentClass string          `json:"content_class"`
	ContentType  string          `json:"content_type"`
	Content      json.RawMessage `json:"content"`
	// ContentEncoding (an extension) is "base64" when content is a string
	// holding the bytes to review in standard base64: the way to submit
	// content that is not UTF-8 text.
	ContentEncoding string `json:"content_encoding"`
}

// EncodingBase64 is the content_encoding of binary content.
const EncodingBase64 = "base64"

// DefaultContentType is assumed when a submission names none.
const DefaultContentType = "text/plain"

// maxContentTypeLen bounds the content_type field.
const maxContentTypeLen = 255

// decodeSubmit parses and validates a submit body (decodeJSON's strict
// rules). The content is the string's UTF-8 bytes when "content" is a JSON
// string, the bytes its base64 encodes with content_encoding "base64",
// otherwise the JSON value itself (object or array), byte for byte. Errors
// are *domain.FieldError naming the field at fault; they wrap
// ErrInvalidRequest or domain.ErrInvalidReviewID (both 400).
func decodeSubmit(body []byte) (engine.SubmitRequest, error) {
	var b submitBody
	if err := decodeJSON(body, &b); err != nil {
		return engine.SubmitRequest{}, err
	}
	if err := domain.ValidateReviewID(b.ReviewID); err != nil {
		return engine.SubmitRequest{}, err
	}
	if b.ContentClass == "" {
		return engine.SubmitRequest{}, fieldError("content_class", "is required")
	}
	if len(b.ContentClass) > 128 {
		return engine.SubmitRequest{}, fieldError("content_class", "longer than 128 characters")
	}
	if b.ContentType == "" {
		b.ContentType = DefaultContentType
	}
	if len(b.ContentType) > maxContentTypeLen {
		return engine.SubmitRequest{}, fieldError("content_type", fmt.Sprintf("longer than %d characters", maxContentTypeLen))
	}
	if _, _, err := mime.ParseMediaType(b.ContentType); err != nil {
		return engine.SubmitRequest{}, fieldError("content_type", fmt.Sprintf("not a media type: %v", err))
	}
	content, err := contentBytes(b.Content, b.ContentEncoding)
	if err != nil {
		return engine.SubmitRequest{}, err
	}
	return engine.SubmitRequest{ReviewID: b.ReviewID, ContentClass: b.ContentClass, ContentType: b.ContentType, Content: content}, nil
}

func contentBytes(raw json.RawMessage, encoding string) ([]byte, error) {
	raw = bytes.TrimSpace(raw)
	switch {
	case encoding != "" && encoding != EncodingBase64:
		return nil, fieldError("content_encoding", fmt.Sprintf("must be %q or absent, got %q", EncodingBase64, encoding))
	case len(raw) == 0 || bytes.Equal(raw, []byte("null")):
		return nil, fieldError("content", "is required")
	case encoding == EncodingBase64:
		var s string
		if raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
			return nil, fieldError("content", "must be a JSON string with content_encoding base64")
		}
		b, err := base64.StdEncoding.Strict().DecodeString(s)
		if err != nil {
			return nil, fieldError("content", "is not standard base64 (RFC 4648, padded)")
		}
		return b, nil
	case raw[0] == '"' && bytes.IndexByte(raw, '\\') < 0:
		// No escape: the text between the quotes is the content (the
		// decoder has checked the string, and that it is valid UTF-8).
		return bytes.Clone(raw[1 : len(raw)-1]), nil
	case raw[0] == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fieldError("content", "not a valid JSON string")
		}
		return []byte(s), nil
	case raw[0] == '{' || raw[0] == '[':
		return []byte(raw), nil
	default:
		return nil, fieldError("content", "must be a string, an object or an array")
	}
}

// submit is POST /v1/reviews: 202 for a new review, 200 with the current
// view for the same review again. With ?wait=D (at most MaxWait) the
// answer, with the same status, waits until the review is no longer
// pending or D has passed, as GET's wait does: a platform gets the decision
// in the submit's own round trip. The review is durable before the wait
// starts, so a client that goes away loses nothing.
func (s *Server) submit(c echo.Context) error {
	body, err := s.readBody(c)
	if err != nil {
		return err
	}
	req, err := decodeSubmit(body)
	if err != nil {
		return err
	}
	wait, err := parseWait(c.QueryParam("wait"))
	if err != nil {
		return err
	}
	if err := s.admit(c, req.ReviewID); err != nil {
		return err
	}
	req.Actor = actor(c)
	ctx := c.Request().Context()
	var created bool
	submit := func() (rv *ledger.Snapshot, err error) {
		rv, created, err = s.deps.Reviews.Submit(ctx, req)
		return rv, err
	}
	var rv *ledger.Snapshot
	if s.canWait(c, wait) {
		rv, err = s.await(ctx, req.ReviewID, wait, submit)
	} else {
		rv, err = submit()
	}
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusAccepted
	}
	c.Response().Header().Set(echo.HeaderLocation, "/v1/reviews/"+rv.ID())
	return c.JSON(status, newReviewView(rv.Review))
}

// admit refuses new work while Config.MaxInFlight reviews are outstanding
// (submitted, not yet out of pending, in any process): accepting it would only produce timeouts. A review that
// exists already is let through, since submitting it again adds no work.
func (s *Server) admit(c echo.Context, reviewID string) error {
	if s.cfg.MaxInFlight == 0 {
		return nil
	}
	n := s.deps.Reviews.Outstanding()
	if n < s.cfg.MaxInFlight {
		return nil
	}
	if _, err := s.deps.Ledger.Load(c.Request().Context(), reviewID); err == nil {
		return nil
	}
	s.metrics.admission.Inc()
	return fmt.Errorf("%d reviews in flight, ceiling %d; retry later: %w", n, s.cfg.MaxInFlight, ErrOverloaded)
}
