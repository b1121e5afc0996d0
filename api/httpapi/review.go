package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/reviewledger/reviewledger/api/view"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

// reviewView is the JSON of a review (GET /v1/reviews/{id}, submit,
// decision), shared with the decision webhooks' body.
type reviewView = view.Review

func newReviewView(r *domain.Review) reviewView { return view.NewReview(r) }

// getReview is GET /v1/reviews/{id}, read from the ledger so a client reads
// its own writes. With ?wait=D (at most MaxWait) it answers as soon as the
// review is no longer pending, or with its pending view once D has passed:
// the request waits on the ledger's watcher, woken by the review's next
// change, reading the review only then.
func (s *Server) getReview(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	wait, err := parseWait(c.QueryParam("wait"))
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	if s.canWait(c, wait) {
		return s.waitReview(c, id, wait)
	}
	rv, err := s.deps.Ledger.Load(ctx, id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, newReviewView(rv.Review))
}

// MaxWait bounds ?wait on GET /v1/reviews/{id} and POST /v1/reviews.
const MaxWait = 60 * time.Second

// canWait reports whether a request asking to wait will: wait is set and
// the server has a watcher. Its response may then come after the server's
// write timeout, which is pushed back by the wait.
func (s *Server) canWait(c echo.Context, wait time.Duration) bool {
	if wait <= 0 || s.deps.Watcher == nil {
		return false
	}
	_ = http.NewResponseController(c.Response().Writer).SetWriteDeadline(time.Now().Add(wait + s.cfg.WriteTimeout))
	return true
}

// watchedLoader is a Ledger that can answer a read made after a watch set
// on its own watcher from the review it keeps, when that watcher vouches
// nothing was missed (*ledger.Ledger).
type watchedLoader interface {
	LoadWatched(ctx context.Context, reviewID string) (*ledger.Snapshot, error)
	Watcher() *ledger.Watcher
}

func (s *Server) waitReview(c echo.Context, id string, wait time.Duration) error {
	ctx := c.Request().Context()
	first := func() (*ledger.Snapshot, error) { return s.deps.Ledger.Load(ctx, id) }
	if wl, ok := s.deps.Ledger.(watchedLoader); ok && s.deps.Watcher == Watcher(wl.Watcher()) {
		first = func() (*ledger.Snapshot, error) { return wl.LoadWatched(ctx, id) }
	}
	rv, err := s.await(ctx, id, wait, first)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, newReviewView(rv.Review))
}

// await returns the review once it is no longer pending, or as it stands
// when wait is over. first gives the review as it stands; it is called
// once the watch is set, so that no change falls between it and the wait.
// A waiter is woken by the review's next change and reads the review only
// then, when the change was made in another process (one made through
// this process's ledger comes with the review as it then stands).
func (s *Server) await(ctx context.Context, id string, wait time.Duration, first func() (*ledger.Snapshot, error)) (*ledger.Snapshot, error) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	s.metrics.waiting.Inc()
	defer s.metrics.waiting.Dec()
	read := first
	var last *ledger.Snapshot // the review as last read
	for {
		changed, stop := s.deps.Watcher.Watch(id)
		rv, err := read()
		if err != nil && last != nil && ctx.Err() == nil {
			rv, err = last, nil // read again later; the view read before stands
		}
		if err != nil || rv.State() != domain.StatePending {
			stop()
			return rv, err
		}
		last = rv
		select {
		case told := <-changed:
			if told != nil && told.State() != domain.StatePending {
				return told, nil // told what it came to: nothing to watch for any more
			}
			read = func() (*ledger.Snapshot, error) {
				if told != nil {
					return told, nil
				}
				return s.deps.Ledger.Load(ctx, id)
			}
			continue
		case <-timer.C:
		case <-ctx.Done():
		}
		stop()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// The wait is over: the review as it stands now, or as last read
		// when it cannot be read now (a submit's review is stored).
		if rv, err := s.deps.Ledger.Load(ctx, id); err == nil {
			return rv, nil
		}
		return last, nil
	}
}

// parseWait reads ?wait: a duration ("30s") or a number of seconds, at
// most MaxWait; empty means no wait.
func parseWait(q string) (time.Duration, error) {
	if q == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(q)
	if err != nil {
		n, nerr := strconv.ParseFloat(q, 64)
		if nerr != nil || math.IsNaN(n) || math.IsInf(n, 0) {
			return 0, fieldError("wait", fmt.Sprintf("must be a duration such as 30s, got %q", q))
		}
		d = time.Duration(n * float64(time.Second))
	}
	if d < 0 || d > MaxWait {
		return 0, fieldError("wait", fmt.Sprintf("must be between 0s and %s, got %s", MaxWait, d))
	}
	return d, nil
}

type eventView struct {
	Version    uint64          `json:"version"`
	Type       string          `json:"type"`
	RecordedAt time.Time       `json:"recorded_at"`
	Data       json.RawMessage `json:"data"`
	// Policy is the snapshot a schema 2 Submitted names by digest
	// (data.policy_digest), resolved and checked against it.
	Policy *domain.PolicySnapshot `json:"policy,omitempty"`
}

type eventsView struct {
	ReviewID string      `json:"review_id"`
	Events   []eventView `json:"events"`
}

// getEvents is GET /v1/reviews/{id}/events: the event bodies in revision
// order, in their canonical form (a body stored compact is given as the
// object its event encodes to).
func (s *Server) getEvents(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	h, err := s.deps.Ledger.History(c.Request().Context(), id)
	if err != nil {
		return err
	}
	v := eventsView{ReviewID: id, Events: make([]eventView, len(h.Events))}
	for i, e := range h.Events {
		body, err := e.Body()
		if err != nil {
			return err
		}
		v.Events[i] = eventView{Version: e.Revision, Type: e.Type, RecordedAt: e.RecordedAt.UTC(), Data: body}
		if sub, ok := e.Event.(domain.Submitted); ok && sub.PolicyDigest != "" {
			v.Events[i].Policy = &sub.Policy
		}
	}
	return c.JSON(http.StatusOK, v)
}
