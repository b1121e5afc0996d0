package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

// command returns the event to append to the review as it stands at now.
type command func(rv *ledger.Snapshot, now time.Time) (domain.Event, error)

// appendCommand runs a moderator's command that coordinates (a claim, a
// release, a hold) through the application service: the review is
// loaded, cmd asked for its event, the event appended at the version
// loaded, and cmd asked again on the review as it then stands when
// another append won the race (ledger.Commands.Coordinate).
func (s *Server) appendCommand(ctx context.Context, id string, by ledger.Actor, cmd command) (*ledger.Snapshot, domain.Event, error) {
	next, step, err := s.commands.Coordinate(ctx, id, nil, by, func(rv *ledger.Snapshot, now time.Time) (ledger.Step, error) {
		e, err := cmd(rv, now)
		if err != nil {
			return ledger.Step{}, fmt.Errorf("review %q: %w", id, err)
		}
		return ledger.Step{Events: []domain.Event{e}}, nil
	})
	if err != nil {
		return nil, nil, err
	}
	return next, step.Events[0], nil
}

// claimView is the answer of a claim.
type claimView struct {
	ReviewID  string    `json:"review_id"`
	Moderator string    `json:"claimed_by"`
	ClaimedAt time.Time `json:"claimed_at"`
	ExpiresAt time.Time `json:"claim_expires_at"`
	Version   uint64    `json:"version"`
}

// claim is POST /v1/manual-queue/{id}/claim: a lease of Config.ClaimLease
// for the calling moderator, recorded as a Claimed event. It takes no
// body; one sent is ignored. Claiming again renews the lease.
func (s *Server) claim(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	name := principal(c).Name
	next, _, err := s.appendCommand(c.Request().Context(), id, actor(c), func(rv *ledger.Snapshot, now time.Time) (domain.Event, error) {
		return rv.Claim(name, s.cfg.ClaimLease, now)
	})
	if err != nil {
		return err
	}
	cl := next.CurrentClaim()
	return c.JSON(http.StatusOK, claimView{ReviewID: id, Moderator: cl.Moderator, ClaimedAt: cl.Since.UTC(),
		ExpiresAt: cl.ExpiresAt.UTC(), Version: next.Version()})
}

// releaseView is the answer of a claim's release.
type releaseView struct {
	ReviewID   string `json:"review_id"`
	ReleasedBy string `json:"released_by"`
	Moderator  string `json:"claimed_by"`
	Version    uint64 `json:"version"`
}

// releaseClaim is DELETE /v1/manual-queue/{id}/claim: the caller's live
// claim (an admin: anyone's) ends, recorded as ClaimReleased.
func (s *Server) releaseClaim(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	p := principal(c)
	next, e, err := s.appendCommand(c.Request().Context(), id, actor(c), func(rv *ledger.Snapshot, now time.Time) (domain.Event, error) {
		return rv.ReleaseClaim(p.Name, p.Role == RoleAdmin, now)
	})
	if err != nil {
		return err
	}
	rel := e.(domain.ClaimReleased)
	return c.JSON(http.StatusOK, releaseView{ReviewID: id, ReleasedBy: rel.By, Moderator: rel.Moderator, Version: next.Version()})
}

type holdBody struct {
	Note            string  `json:"note"`
	ExpectedVersion *uint64 `json:"expected_version"`
}

// holdView is the answer of a hold and of its end.
type holdView struct {
	ReviewID string     `json:"review_id"`
	Held     bool       `json:"held"`
	HeldBy   *string    `json:"held_by"`
	HeldAt   *time.Time `json:"held_at"`
	HoldNote *string    `json:"hold_note"`
	Version  uint64     `json:"version"`
}

func newHoldView(rv *ledger.Snapshot) holdView {
	v := holdView{ReviewID: rv.ID(), Version: rv.Version()}
	if h := rv.Hold(); h != nil {
		at := h.At.UTC()
		v.Held, v.HeldBy, v.HeldAt, v.HoldNote = true, &h.By, &at, &h.Note
	}
	return v
}

// hold is POST /v1/manual-queue/{id}/hold: a Held event with the note.
func (s *Server) hold(c echo.Context) error {
	var b holdBody
	id, err := s.pathAndBody(c, &b)
	if err != nil {
		return err
	}
	if err := checkNote(b.Note, true); err != nil {
		return err
	}
	name := principal(c).Name
	next, _, err := s.appendCommand(c.Request().Context(), id, actor(c), func(rv *ledger.Snapshot, now time.Time) (domain.Event, error) {
		return rv.PutOnHold(domain.HoldCommand{By: name, Note: b.Note, ExpectedVersion: b.ExpectedVersion}, now)
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, newHoldView(next))
}

// unhold is DELETE /v1/manual-queue/{id}/hold: an Unheld event.
func (s *Server) unhold(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	name := principal(c).Name
	next, _, err := s.appendCommand(c.Request().Context(), id, actor(c), func(rv *ledger.Snapshot, now time.Time) (domain.Event, error) {
		return rv.TakeOffHold(name, now)
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, newHoldView(next))
}

// pathAndBody reads the review ID of the path and decodes the JSON body
// into v.
func (s *Server) pathAndBody(c echo.Context, v any) (string, error) {
	id, err := pathID(c)
	if err != nil {
		return "", err
	}
	body, err := s.readBody(c)
	if err != nil {
		return "", err
	}
	return id, decodeJSON(body, v)
}

// checkNote bounds a note; required ones must not be empty.
func checkNote(note string, required bool) error {
	switch {
	case required && note == "":
		return fieldError("note", "is required")
	case utf8.RuneCountInString(note) > maxNoteLen:
		return fieldError("note", fmt.Sprintf("longer than %d characters", maxNoteLen))
	}
	return nil
}

type requeueBody struct {
	ExpectedVersion *uint64 `json:"expected_version"`
	Note            string  `json:"note"`
}

// requeuedView is the review view after a requeue, with its round.
type requeuedView struct {
	reviewView
	Round int `json:"round"`
}

// requeue is POST /v1/manual-queue/{id}/requeue: the review goes back to
// the automated path as a new round with a fresh budget.
func (s *Server) requeue(c echo.Context) error {
	var b requeueBody
	id, err := s.pathAndBody(c, &b)
	if err != nil {
		return err
	}
	if b.ExpectedVersion == nil {
		return fieldError("expected_version", "is required: the review version the moderator saw")
	}
	if err := checkNote(b.Note, false); err != nil {
		return err
	}
	if s.deps.Requeue == nil {
		return fmt.Errorf("requeue: no engine to requeue to: %w", ErrNotReady)
	}
	ctx := c.Request().Context()
	rv, err := s.deps.Ledger.Load(ctx, id)
	if err != nil {
		return err
	}
	next, err := s.requeueLoaded(ctx, rv, *b.ExpectedVersion, actor(c), b.Note)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, requeuedView{reviewView: newReviewView(next.Review), Round: next.Round()})
}

// requeueLoaded requeues rv as a moderator who saw version expected.
func (s *Server) requeueLoaded(ctx context.Context, rv *ledger.Snapshot, expected uint64, by ledger.Actor, note string) (*ledger.Snapshot, error) {
	e, err := rv.Requeue(domain.RequeueCommand{By: by.Name, Note: note, ExpectedVersion: expected}, s.cfg.Now())
	if err != nil {
		return nil, fmt.Errorf("requeue review %q: %w", rv.ID(), err)
	}
	next, err := s.deps.Requeue.Requeue(ctx, rv, e, by)
	if err != nil {
		return nil, err
	}
	s.metrics.requeues()
	return next, nil
}
