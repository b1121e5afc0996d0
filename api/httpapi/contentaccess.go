package httpapi

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/reviewledger/reviewledger/api/contentaccess"
	"github.com/reviewledger/reviewledger/domain"
)

// ContentAccess is the record of reads of reviews' content
// (*contentaccess.DB).
type ContentAccess interface {
	// Record stores one read; the content is sent only when it returns
	// nil.
	Record(ctx context.Context, a contentaccess.Access) error
	// ForReview lists a review's reads, oldest first.
	ForReview(ctx context.Context, reviewID string) ([]contentaccess.Access, error)
	// Between calls fn with every read in [from, to), oldest first.
	Between(ctx context.Context, from, to time.Time, fn func(contentaccess.Access) error) error
}

var _ ContentAccess = (*contentaccess.DB)(nil)

// contentAccessView is the body of GET /v1/reviews/{id}/content-access.
type contentAccessView struct {
	ReviewID string                 `json:"review_id"`
	Accesses []contentaccess.Access `json:"accesses"`
}

// reviewContentAccess is GET /v1/reviews/{id}/content-access: who read
// the review's content, when and how, for auditors. A review whose
// content nobody read has an empty list; an unknown review is 404.
func (s *Server) reviewContentAccess(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	if s.deps.ContentAccess == nil {
		return fmt.Errorf("content access: no content-access record configured: %w", ErrNotReady)
	}
	ctx := c.Request().Context()
	accesses, err := s.deps.ContentAccess.ForReview(ctx, id)
	if err != nil {
		return err
	}
	if len(accesses) == 0 {
		if _, err := s.deps.Ledger.Load(ctx, id); err != nil {
			return err // domain.ErrReviewNotFound: 404
		}
	}
	if accesses == nil {
		accesses = []contentaccess.Access{}
	}
	return c.JSON(http.StatusOK, contentAccessView{ReviewID: id, Accesses: accesses})
}

// Media types of the content-access export.
const (
	MIMEJSONLines = "application/jsonl"
	MIMECSV       = "text/csv; charset=utf-8"
)

// exportContentAccess is GET /v1/content-access?from=&to=&format=: every
// read of any review's content in [from, to), oldest first, as JSON lines
// (format=jsonl, the default) or CSV with a header row (format=csv).
// from and to are RFC 3339 times; to defaults to now and from to 24 hours
// before to.
func (s *Server) exportContentAccess(c echo.Context) error {
	if s.deps.ContentAccess == nil {
		return fmt.Errorf("content access: no content-access record configured: %w", ErrNotReady)
	}
	q := c.QueryParams()
	to := s.cfg.Now().UTC()
	if v := q.Get("to"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return &domain.FieldError{Field: "to", Reason: fmt.Sprintf("must be an RFC 3339 time, got %q", v), Err: ErrInvalidRequest}
		}
		to = t
	}
	from := to.Add(-24 * time.Hour)
	if v := q.Get("from"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return &domain.FieldError{Field: "from", Reason: fmt.Sprintf("must be an RFC 3339 time, got %q", v), Err: ErrInvalidRequest}
		}
		from = t
	}
	if !from.Before(to) {
		return &domain.FieldError{Field: "from", Reason: "must be before to", Err: ErrInvalidRequest}
	}
	format := q.Get("format")
	switch format {
	case "", "jsonl":
		format = "jsonl"
	case "csv":
	default:
		return &domain.FieldError{Field: "format", Reason: fmt.Sprintf("must be jsonl or csv, got %q", format), Err: ErrInvalidRequest}
	}
	res := c.Response()
	res.Header().Set(echo.HeaderCacheControl, "no-store")
	name := fmt.Sprintf("content-access-%s-%s.%s", from.UTC().Format("20060102T150405Z"), to.UTC().Format("20060102T150405Z"), format)
	res.Header().Set(echo.HeaderContentDisposition, `attachment; filename="`+name+`"`)
	ctx := c.Request().Context()
	if format == "csv" {
		res.Header().Set(echo.HeaderContentType, MIMECSV)
		w := csv.NewWriter(res)
		started := false
		start := func() error {
			if started {
				return nil
			}
			started = true
			res.WriteHeader(http.StatusOK)
			return w.Write(contentaccess.Columns)
		}
		err := s.deps.ContentAccess.Between(ctx, from, to, func(a contentaccess.Access) error {
			if err := start(); err != nil {
				return err
			}
			return w.Write(a.Record())
		})
		if err == nil {
			err = start()
		}
		w.Flush()
		return s.exportError(c, started, err, w.Error())
	}
	res.Header().Set(echo.HeaderContentType, MIMEJSONLines)
	enc := json.NewEncoder(res)
	started := false
	err := s.deps.ContentAccess.Between(ctx, from, to, func(a contentaccess.Access) error {
		if !started {
			started = true
			res.WriteHeader(http.StatusOK)
		}
		return enc.Encode(a)
	})
	if err == nil && !started {
		res.WriteHeader(http.StatusOK)
	}
	return s.exportError(c, started, err, nil)
}

// exportError is what an export that failed returns: the error, answered
// as a problem, when nothing was sent yet; once rows are sent the status
// is gone, and the body is cut short (the client sees no final newline or
// a truncated CSV) while the error is logged.
func (s *Server) exportError(c echo.Context, started bool, err, flushErr error) error {
	if err == nil {
		err = flushErr
	}
	if err == nil {
		return nil
	}
	if started {
		s.log.LogAttrs(c.Request().Context(), slog.LevelError, "content-access export cut short",
			slog.String("request_id", requestID(c)), slog.String("error", err.Error()))
		panic(http.ErrAbortHandler)
	}
	return err
}
