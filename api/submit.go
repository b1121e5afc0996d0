package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/reviewledger/reviewledger/api/engine"
	"github.com/reviewledger/reviewledger/domain"
)

// submitBody is the JSON body of POST /v1/reviews.
type submitBody struct {
	ReviewID     string          `json:"review_id"`
	ContentClass string          `json:"content_class"`
	ContentType  string          `json:"content_type"`
	Content      json.RawMessage `json:"content"`
}

// DefaultContentType is assumed when a submission names none.
const DefaultContentType = "text/plain"

// maxContentTypeLen bounds the content_type field.
const maxContentTypeLen = 255

// decodeSubmit parses and validates a submit body. The content is the
// string's UTF-8 bytes when "content" is a JSON string, otherwise the JSON
// value itself (object or array), byte for byte. Errors are
// *domain.FieldError naming the field at fault; they wrap ErrInvalidRequest
// or domain.ErrInvalidReviewID (both 400).
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
	content, err := contentBytes(b.Content)
	if err != nil {
		return engine.SubmitRequest{}, err
	}
	return engine.SubmitRequest{ReviewID: b.ReviewID, ContentClass: b.ContentClass, ContentType: b.ContentType, Content: content}, nil
}

func contentBytes(raw json.RawMessage) ([]byte, error) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0 || bytes.Equal(raw, []byte("null")):
		return nil, fieldError("content", "is required")
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

// decodeJSON decodes one JSON object into v, naming the field of a type
// mismatch. Unknown fields are ignored; anything after the object is not.
func decodeJSON(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return fieldError("body", "is empty; a JSON object is required")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return fieldError(te.Field, fmt.Sprintf("must be a JSON %s", te.Type.Kind()))
		}
		if errors.As(err, &te) {
			return fieldError("body", "must be a JSON object")
		}
		return fieldError("body", fmt.Sprintf("malformed JSON: %v", err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fieldError("body", "unexpected data after the JSON object")
	}
	return nil
}

// submit is POST /v1/reviews: 202 for a new review, 200 with the current
// view for the same review again.
func (s *Server) submit(c echo.Context) error {
	body, err := s.readBody(c)
	if err != nil {
		return err
	}
	req, err := decodeSubmit(body)
	if err != nil {
		return err
	}
	if err := s.admit(c, req.ReviewID); err != nil {
		return err
	}
	req.Actor = actor(c)
	rv, created, err := s.deps.Reviews.Submit(c.Request().Context(), req)
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
