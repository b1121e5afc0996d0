package httpapi

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

// Timeline entry kinds.
const (
	KindSubmitted = "submitted"
	KindAttempt   = "attempt"
	KindEscalated = "escalated"
	KindRequeued  = "requeued"
	KindClaimed   = "claimed"
	KindReleased  = "released"
	KindHeld      = "held"
	KindUnheld    = "unheld"
	KindApproval  = "approval"
	KindDecided   = "decided"
)

// Attempt outcomes in a timeline.
const (
	AttemptFinding  = "finding"
	AttemptFailed   = "failed"
	AttemptInFlight = "in_flight"
)

// timelineEntry is one step of a review's history as a review panel shows
// it. Fields that do not apply to the kind are left out.
type timelineEntry struct {
	Version        uint64     `json:"version"`
	At             time.Time  `json:"at"`
	Kind           string     `json:"kind"`
	Round          int        `json:"round"`
	Actor          string     `json:"actor,omitempty"`
	Attempt        int        `json:"attempt,omitempty"`
	Provider       string     `json:"provider,omitempty"`
	Outcome        string     `json:"outcome,omitempty"`
	Classification string     `json:"classification,omitempty"`
	DurationMS     *int64     `json:"duration_ms,omitempty"`
	EndedAt        *time.Time `json:"ended_at,omitempty"`
	Detail         string     `json:"detail,omitempty"`
	State          string     `json:"state,omitempty"`
	Reasons        []string   `json:"reasons,omitempty"`
	Reason         string     `json:"reason,omitempty"`
	Note           string     `json:"note,omitempty"`
	Deadline       *time.Time `json:"deadline,omitempty"`
	ExpiresAt      *time.Time `json:"expires_at,omitempty"`
}

type timelineView struct {
	ReviewID     string          `json:"review_id"`
	State        string          `json:"state"`
	ContentClass string          `json:"content_class"`
	Version      uint64          `json:"version"`
	Round        int             `json:"round"`
	Entries      []timelineEntry `json:"entries"`
}

// timeline is GET /v1/reviews/{id}/timeline, read from the ledger: the
// review's attempts (with their classifications and durations),
// escalations, requeues, claims, holds, votes and decision, for moderators
// and auditors. It holds no content.
func (s *Server) timeline(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	h, err := s.deps.Ledger.History(c.Request().Context(), id)
	if err != nil {
		return err
	}
	rv, err := h.Snapshot()
	if err != nil {
		return err
	}
	v := timelineView{ReviewID: id, State: string(rv.State()), ContentClass: rv.Class(), Version: rv.Version(),
		Round: rv.Round(), Entries: buildTimeline(h.Events)}
	return c.JSON(http.StatusOK, v)
}

// buildTimeline folds a review's events into entries: one per event, but
// one per attempt (its start, completed by its end).
func buildTimeline(events []ledger.Entry) []timelineEntry {
	out := make([]timelineEntry, 0, len(events))
	attempts := map[int]int{} // attempt number -> index in out
	round := 1
	for _, e := range events {
		en := timelineEntry{Version: e.Revision, At: e.RecordedAt.UTC(), Round: round, Actor: e.Metadata.Actor}
		switch d := e.Event.(type) {
		case domain.Submitted:
			en.Kind, en.At, en.Deadline = KindSubmitted, d.SubmittedAt.UTC(), utc(d.Deadline)
		case domain.AttemptStarted:
			en.Kind, en.At, en.Attempt, en.Outcome = KindAttempt, d.StartedAt.UTC(), d.Attempt, AttemptInFlight
			en.Provider = d.ProviderName()
			attempts[d.Attempt] = len(out)
		case domain.AttemptTimedOut:
			if i, ok := attempts[d.Attempt]; ok {
				a := &out[i]
				a.Outcome, a.Classification, a.Detail = AttemptFailed, string(d.Classification), d.Detail
				a.DurationMS, a.EndedAt = &d.ElapsedMS, utc(d.At)
			}
			continue
		case domain.FindingReceived:
			if i, ok := attempts[d.Attempt]; ok {
				a := &out[i]
				a.Outcome, a.State, a.Reasons = AttemptFinding, string(d.State), d.Reasons
				a.DurationMS, a.EndedAt = &d.ElapsedMS, utc(d.ReceivedAt)
			}
			continue
		case domain.Escalated:
			en.Kind, en.At, en.Reason, en.State, en.Detail = KindEscalated, d.At.UTC(), string(d.Reason), string(d.State), d.Detail
		case domain.Requeued:
			round = d.Round
			en.Kind, en.At, en.Round, en.Actor, en.Note, en.Deadline = KindRequeued, d.At.UTC(), round, d.By, d.Note, utc(d.Deadline)
		case domain.Claimed:
			en.Kind, en.At, en.Actor, en.ExpiresAt = KindClaimed, d.ClaimedAt.UTC(), d.Moderator, utc(d.ExpiresAt)
		case domain.ClaimReleased:
			en.Kind, en.At, en.Actor, en.Reason = KindReleased, d.At.UTC(), d.By, string(d.Reason)
			en.Detail = "claim of " + d.Moderator
		case domain.Held:
			en.Kind, en.At, en.Actor, en.Note = KindHeld, d.At.UTC(), d.By, d.Note
		case domain.Unheld:
			en.Kind, en.At, en.Actor = KindUnheld, d.At.UTC(), d.By
		case domain.ManualApprovalRecorded:
			en.Kind, en.At, en.Actor, en.State, en.Note = KindApproval, d.At.UTC(), d.Moderator, string(d.State), d.Note
		case domain.ManualDecisionRecorded:
			en.Kind, en.At, en.Actor, en.State, en.Note = KindDecided, d.At.UTC(), d.Moderator, string(d.State), d.Note
		default:
			continue
		}
		out = append(out, en)
	}
	return out
}

func utc(t time.Time) *time.Time {
	t = t.UTC()
	return &t
}
