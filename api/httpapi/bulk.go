package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	v1json "github.com/go-json-experiment/json/v1"
	"github.com/labstack/echo/v4"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/projections"
)

// Bulk outcomes, one per item.
const (
	OutcomeRequeued   = "requeued"
	OutcomeReleased   = "released"
	OutcomeMovedOn    = "moved_on"
	OutcomeConflict   = "conflict"
	OutcomeClaimed    = "claimed"
	OutcomeNotClaimed = "not_claimed"
	OutcomeNotFound   = "not_found"
)

// DefaultBulkLimit is the page of a bulk action by filter.
const DefaultBulkLimit = 100

type bulkFilter struct {
	ContentClass string `json:"content_class"`
	Reason       string `json:"reason"`
	ClaimedBy    string `json:"claimed_by"`
}

type bulkItem struct {
	ReviewID        string  `json:"review_id"`
	ExpectedVersion *uint64 `json:"expected_version"`
}

// itemFields is bulkItem without bulkOptions' unmarshaler of it.
type itemFields bulkItem

// bulkOptions are decodeJSON's options for a bulk body. A bulk action
// changes many reviews: a member it does not know, in the body or in its
// filter (a misspelt dry_run or filter key), must not widen or arm it. An
// item is read as encoding/json reads it, as it always was: its names
// match up to case, the last of a name twice is taken, and a member it
// does not know is ignored.
var bulkOptions = json.JoinOptions(
	json.RejectUnknownMembers(true),
	json.WithUnmarshalers(json.UnmarshalFromFunc(func(dec *jsontext.Decoder, it *bulkItem) error {
		return json.UnmarshalDecode(dec, (*itemFields)(it),
			json.MatchCaseInsensitiveNames(true), v1json.MatchCaseSensitiveDelimiter(true),
			json.RejectUnknownMembers(false), v1json.MergeWithLegacySemantics(true))
	})),
)

// decodeBulkJSON is decodeJSON for a bulk body, whose filter, like the
// body, names each member once.
func decodeBulkJSON(body []byte, b *bulkBody) error {
	if err := decodeJSON(body, b, bulkOptions); err != nil || b.Filter == nil {
		return err
	}
	return objectFault(memberValue(body, "filter"), nil, "filter.")
}

type bulkBody struct {
	Filter *bulkFilter `json:"filter"`
	Items  []bulkItem  `json:"items"`
	Note   string      `json:"note"`
	DryRun bool        `json:"dry_run"`
	Limit  *int        `json:"limit"`
	Cursor string      `json:"cursor"`
}

type bulkOutcome struct {
	ReviewID string  `json:"review_id"`
	Outcome  string  `json:"outcome"`
	Version  *uint64 `json:"version,omitempty"`
	Detail   string  `json:"detail,omitempty"`
}

type bulkView struct {
	DryRun     bool           `json:"dry_run"`
	Total      int            `json:"total"`
	Counts     map[string]int `json:"counts"`
	Items      []bulkOutcome  `json:"items"`
	NextCursor *string        `json:"next_cursor"`
}

// bulkAction acts on one selected item: expected is the version the
// moderator saw, nil when unknown. An error stops the whole request (the
// store could not be used); refusals are outcomes.
type bulkAction func(ctx context.Context, id string, expected *uint64) (bulkOutcome, error)

// decodeBulk parses and checks a bulk body; release allows claimed_by.
func (s *Server) decodeBulk(c echo.Context, release bool) (bulkBody, projections.QueueQuery, error) {
	var b bulkBody
	body, err := s.readBody(c)
	if err != nil {
		return b, projections.QueueQuery{}, err
	}
	if err := decodeBulkJSON(body, &b); err != nil {
		return b, projections.QueueQuery{}, err
	}
	if (b.Filter == nil) == (b.Items == nil) {
		return b, projections.QueueQuery{}, fieldError("filter", "give exactly one of filter and items")
	}
	if err := checkNote(b.Note, false); err != nil {
		return b, projections.QueueQuery{}, err
	}
	q := projections.QueueQuery{Order: projections.OrderID, After: b.Cursor, Limit: DefaultBulkLimit}
	if b.Limit != nil {
		if *b.Limit < 1 || *b.Limit > MaxQueueLimit {
			return b, q, fieldError("limit", fmt.Sprintf("must be an integer from 1 to %d, got %d", MaxQueueLimit, *b.Limit))
		}
		q.Limit = *b.Limit
	}
	if b.Items != nil {
		return b, q, checkBulkItems(b.Items)
	}
	f := b.Filter
	if !release && f.ClaimedBy != "" {
		return b, q, fieldError("filter.claimed_by", "selects claims to release; not for a requeue")
	}
	if err := s.checkClass(f.ContentClass, "filter.content_class"); err != nil {
		return b, q, err
	}
	switch {
	case len(f.Reason) > 64:
		return b, q, fieldError("filter.reason", "at most 64 characters")
	case len(f.ClaimedBy) > 256:
		return b, q, fieldError("filter.claimed_by", "at most 256 characters")
	case len(b.Cursor) > 128:
		return b, q, fieldError("cursor", "at most 128 characters: send back the next_cursor of the page before")
	}
	// A filter never selects held items: they are acted on by ID only.
	q.Class, q.Reason, q.ClaimedBy, q.Held = f.ContentClass, f.Reason, f.ClaimedBy, projections.HeldExcluded
	return b, q, nil
}

func checkBulkItems(items []bulkItem) error {
	switch {
	case len(items) == 0:
		return fieldError("items", "must list at least one review")
	case len(items) > MaxQueueLimit:
		return fieldError("items", fmt.Sprintf("at most %d, got %d", MaxQueueLimit, len(items)))
	}
	seen := make(map[string]bool, len(items))
	for i, it := range items {
		field := fmt.Sprintf("items[%d].review_id", i)
		if err := domain.ValidateReviewID(it.ReviewID); err != nil {
			return &domain.FieldError{Field: field, Reason: err.Error(), Err: domain.ErrInvalidReviewID}
		}
		if seen[it.ReviewID] {
			return fieldError(field, fmt.Sprintf("%q is listed twice", it.ReviewID))
		}
		seen[it.ReviewID] = true
	}
	return nil
}

// runBulk counts the selection and, unless it is a dry run, applies act
// to one page of it, item by item.
func (s *Server) runBulk(c echo.Context, b bulkBody, q projections.QueueQuery, act bulkAction) error {
	if s.deps.ReadModels == nil {
		return fmt.Errorf("bulk action: no read models configured: %w", ErrNotReady)
	}
	ctx := c.Request().Context()
	now := s.cfg.Now()
	if b.Items != nil {
		q = projections.QueueQuery{Held: projections.HeldAny}
		for _, it := range b.Items {
			q.IDs = append(q.IDs, it.ReviewID)
		}
	}
	total, err := s.deps.ReadModels.CountQueue(ctx, q, now)
	if err != nil {
		return err
	}
	v := bulkView{DryRun: b.DryRun, Total: total, Counts: map[string]int{}, Items: []bulkOutcome{}}
	if b.DryRun {
		return c.JSON(http.StatusOK, v)
	}
	items := b.Items
	if items == nil {
		if items, v.NextCursor, err = s.bulkPage(ctx, q, now); err != nil {
			return err
		}
	}
	for _, it := range items {
		out, err := act(ctx, it.ReviewID, it.ExpectedVersion)
		if err != nil {
			return err
		}
		v.Items = append(v.Items, out)
		v.Counts[out.Outcome]++
	}
	s.metrics.bulkItems(c.Path(), v.Counts)
	return c.JSON(http.StatusOK, v)
}

// bulkPage reads one page of the selection in review ID order, with the
// versions the projection shows, and the cursor of the next page (nil on
// the last).
func (s *Server) bulkPage(ctx context.Context, q projections.QueueQuery, now time.Time) ([]bulkItem, *string, error) {
	page, err := s.deps.ReadModels.ManualQueue(ctx, q, now)
	if err != nil {
		return nil, nil, err
	}
	items := make([]bulkItem, len(page.Items))
	for i, it := range page.Items {
		items[i] = bulkItem{ReviewID: it.ReviewID, ExpectedVersion: &it.Version}
	}
	if len(items) < q.Limit {
		return items, nil, nil
	}
	last := items[len(items)-1].ReviewID
	more := q
	more.After, more.Limit = last, 1
	rest, err := s.deps.ReadModels.ManualQueue(ctx, more, now)
	if err != nil || len(rest.Items) == 0 {
		return items, nil, err
	}
	return items, &last, nil
}

// outcomeOf turns a refusal into an item's outcome; an error that is no
// refusal stops the request.
func outcomeOf(id string, err error) (bulkOutcome, error) {
	out := bulkOutcome{ReviewID: id, Detail: err.Error()}
	switch {
	case errors.Is(err, domain.ErrReviewNotFound):
		out.Outcome = OutcomeNotFound
	case errors.Is(err, domain.ErrNotInManualReview):
		out.Outcome = OutcomeMovedOn
	case errors.Is(err, domain.ErrVersionMismatch), errors.Is(err, eventstore.ErrWrongExpectedVersion):
		out.Outcome = OutcomeConflict
	case errors.Is(err, domain.ErrClaimedByOther):
		out.Outcome = OutcomeClaimed
	case errors.Is(err, domain.ErrNotClaimed):
		out.Outcome = OutcomeNotClaimed
	default:
		return out, err
	}
	return out, nil
}

// bulkRequeue is POST /v1/manual-queue/bulk/requeue.
func (s *Server) bulkRequeue(c echo.Context) error {
	b, q, err := s.decodeBulk(c, false)
	if err != nil {
		return err
	}
	if s.deps.Requeue == nil {
		return fmt.Errorf("requeue: no engine to requeue to: %w", ErrNotReady)
	}
	by := actor(c)
	return s.runBulk(c, b, q, func(ctx context.Context, id string, expected *uint64) (bulkOutcome, error) {
		rv, err := s.deps.Ledger.Load(ctx, id)
		if err != nil {
			return outcomeOf(id, err)
		}
		seen := rv.Version()
		if expected != nil {
			seen = *expected
		}
		next, err := s.requeueLoaded(ctx, rv, seen, by, b.Note)
		if err != nil {
			return outcomeOf(id, err)
		}
		v := next.Version()
		return bulkOutcome{ReviewID: id, Outcome: OutcomeRequeued, Version: &v}, nil
	})
}

// bulkRelease is POST /v1/manual-queue/bulk/release: moderators release
// their own claims, admins anyone's.
func (s *Server) bulkRelease(c echo.Context) error {
	b, q, err := s.decodeBulk(c, true)
	if err != nil {
		return err
	}
	p := principal(c)
	by := actor(c)
	return s.runBulk(c, b, q, func(ctx context.Context, id string, _ *uint64) (bulkOutcome, error) {
		next, _, err := s.appendCommand(ctx, id, by, func(rv *ledger.Snapshot, now time.Time) (domain.Event, error) {
			return rv.ReleaseClaim(p.Name, p.Role == RoleAdmin, now)
		})
		if err != nil {
			return outcomeOf(id, err)
		}
		v := next.Version()
		return bulkOutcome{ReviewID: id, Outcome: OutcomeReleased, Version: &v}, nil
	})
}

// checkClass refuses a content class the policy does not name (422
// unknown-class, naming field), as the content_class query does.
func (s *Server) checkClass(class, field string) error {
	if len(class) > 128 {
		return fieldError(field, "longer than 128 characters")
	}
	if class != "" && len(s.cfg.Classes) > 0 && !slices.Contains(s.cfg.Classes, class) {
		return &domain.FieldError{Field: field,
			Reason: fmt.Sprintf("unknown content class %q; the policy's classes are %s", class, strings.Join(s.cfg.Classes, ", ")),
			Err:    domain.ErrUnknownClass}
	}
	return nil
}
