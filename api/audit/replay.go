package audit

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

// Step is one event of a replayed timeline.
type Step struct {
	Revision uint64
	Type     string
	// At is the event's own time (submission, attempt start, ...).
	At time.Time
	// Elapsed is At minus the submission time.
	Elapsed time.Duration
	Attempt int // 0 when the event concerns no attempt
	// Detail is the classification, state, reason or vote of the event.
	Detail string
	Actor  string
}

// Replay is a review's timeline up to a moment and the state rebuilt from
// it.
type Replay struct {
	ReviewID string
	// AsOf is the moment replayed to; zero for the whole history.
	AsOf   time.Time
	Steps  []Step
	Review *domain.Review
	// Later is how many events come after AsOf.
	Later int
	// Chain is nil when the replayed events' hash chain holds.
	Chain error
	// Conflicts are the review's conflicting completions up to AsOf, nil
	// unless AddConflicts was called; LaterConflicts come after AsOf.
	// ConflictChain is nil when their hash chain holds.
	Conflicts      []ConflictStep
	LaterConflicts int
	ConflictChain  error
	// Shadows are the review's shadow observations up to AsOf (AddShadows),
	// LaterShadows those after it; ShadowChain is nil when their hash
	// chain holds.
	Shadows      []ShadowStep
	LaterShadows int
	ShadowChain  error
}

// NewReplay replays h up to asOf (the whole history when asOf is zero):
// every event whose own time is not after asOf.
func NewReplay(h *ledger.History, asOf time.Time) (*Replay, error) {
	r := &Replay{ReviewID: h.ReviewID, AsOf: asOf}
	entries := h.Events
	if !asOf.IsZero() {
		n := 0
		for n < len(entries) && !eventTime(entries[n]).After(asOf) {
			n++
		}
		r.Later = len(entries) - n
		entries = entries[:n]
	}
	if len(entries) == 0 {
		return nil, fmt.Errorf("review %q has no events as of %s: %w", h.ReviewID, asOf.UTC().Format(time.RFC3339), domain.ErrReviewNotFound)
	}
	prefix := &ledger.History{ReviewID: h.ReviewID, Events: entries}
	r.Chain = prefix.Verify()
	rv, err := prefix.Snapshot()
	if err != nil {
		return nil, err
	}
	r.Review = rv.Review
	submitted := eventTime(entries[0])
	for _, e := range entries {
		at := eventTime(e)
		r.Steps = append(r.Steps, Step{
			Revision: e.Revision, Type: e.Type, At: at, Elapsed: at.Sub(submitted).Round(time.Millisecond),
			Attempt: attemptOf(e.Event), Detail: detailOf(e.Event), Actor: e.Metadata.Actor,
		})
	}
	return r, nil
}

// eventTime is the time an event records, or when it was stored.
func eventTime(e ledger.Entry) time.Time {
	switch ev := e.Event.(type) {
	case domain.Submitted:
		return ev.SubmittedAt
	case domain.AttemptStarted:
		return ev.StartedAt
	case domain.AttemptTimedOut:
		return ev.At
	case domain.FindingReceived:
		return ev.ReceivedAt
	case domain.Escalated:
		return ev.At
	case domain.ManualApprovalRecorded:
		return ev.At
	case domain.ManualDecisionRecorded:
		return ev.At
	case domain.Requeued:
		return ev.At
	case domain.Claimed:
		return ev.ClaimedAt
	case domain.ClaimReleased:
		return ev.At
	case domain.Held:
		return ev.At
	case domain.Unheld:
		return ev.At
	}
	return e.RecordedAt
}

func attemptOf(e domain.Event) int {
	switch ev := e.(type) {
	case domain.AttemptStarted:
		return ev.Attempt
	case domain.AttemptTimedOut:
		return ev.Attempt
	case domain.FindingReceived:
		return ev.Attempt
	}
	return 0
}

func detailOf(e domain.Event) string {
	switch ev := e.(type) {
	case domain.Submitted:
		return fmt.Sprintf("class=%s budget=%s max_attempts=%d", ev.ContentClass, ms(ev.Policy.BudgetMS), ev.Policy.MaxAttempts)
	case domain.AttemptStarted:
		s := fmt.Sprintf("timeout=%s remaining=%s", ms(ev.AttemptTimeoutMS), ms(ev.RemainingBudgetMS))
		if ev.Provider != "" {
			s += " provider=" + ev.Provider
		}
		if len(ev.Shadows) > 0 {
			s += " shadows=" + strings.Join(ev.Shadows, ",")
		}
		return s
	case domain.AttemptTimedOut:
		s := fmt.Sprintf("%s after %s", ev.Classification, ms(ev.ElapsedMS))
		if ev.Detail != "" {
			s += " (" + ev.Detail + ")"
		}
		return s
	case domain.FindingReceived:
		return fmt.Sprintf("%s via %s after %s%s", ev.State, ev.Source, ms(ev.ElapsedMS), reasons(ev.Reasons))
	case domain.Escalated:
		return fmt.Sprintf("%s -> %s", ev.Reason, ev.State)
	case domain.ManualApprovalRecorded:
		return fmt.Sprintf("vote %s by %s%s", ev.State, ev.Moderator, note(ev.Note))
	case domain.ManualDecisionRecorded:
		s := fmt.Sprintf("%s by %s%s", ev.State, ev.Moderator, note(ev.Note))
		if len(ev.Approvers) > 0 {
			s += " approvers=" + strings.Join(ev.Approvers, ",")
		}
		return s
	}
	return moderationDetail(e)
}

// moderationDetail describes the events of a moderation team.
func moderationDetail(e domain.Event) string {
	switch ev := e.(type) {
	case domain.Requeued:
		return fmt.Sprintf("round %d by %s, budget=%s deadline=%s%s", ev.Round, ev.By, ms(ev.BudgetMS), stamp(ev.Deadline), note(ev.Note))
	case domain.Claimed:
		return fmt.Sprintf("by %s until %s", ev.Moderator, stamp(ev.ExpiresAt))
	case domain.ClaimReleased:
		return fmt.Sprintf("%s's claim %s by %s", ev.Moderator, ev.Reason, ev.By)
	case domain.Held:
		return fmt.Sprintf("by %s%s", ev.By, note(ev.Note))
	case domain.Unheld:
		return "by " + ev.By
	}
	return ""
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

func reasons(rs []string) string {
	if len(rs) == 0 {
		return ""
	}
	return " reasons=" + strings.Join(rs, ",")
}

func note(n string) string {
	if n == "" {
		return ""
	}
	return fmt.Sprintf(" note=%q", n)
}

// Render writes the timeline and the rebuilt state as text.
func (r *Replay) Render(w io.Writer) error {
	ew := &errWriter{w: w}
	fmt.Fprintf(ew, "review %s", r.ReviewID)
	if !r.AsOf.IsZero() {
		fmt.Fprintf(ew, " as of %s (%d later events not shown)", stamp(r.AsOf), r.Later)
	}
	fmt.Fprint(ew, "\n\n")
	tw := tabwriter.NewWriter(ew, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REV\tTYPE\tTIME\tELAPSED\tATTEMPT\tDETAIL\tACTOR")
	for _, s := range r.Steps {
		attempt := "-"
		if s.Attempt > 0 {
			attempt = fmt.Sprint(s.Attempt)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Revision, s.Type, stamp(s.At), s.Elapsed, attempt, s.Detail, dash(s.Actor))
	}
	_ = tw.Flush()

	rv := r.Review
	fmt.Fprint(ew, "\nstate rebuilt from these events:\n")
	tw = tabwriter.NewWriter(ew, 0, 4, 1, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "  %s:\t%s\n", k, v) }
	row("state", string(rv.State()))
	row("content_class", rv.Class())
	row("attempts", fmt.Sprint(rv.Attempts()))
	row("version", fmt.Sprint(rv.Version()))
	row("submitted_at", stamp(rv.SubmittedAt()))
	row("deadline", stamp(rv.Deadline()))
	row("decided_at", stamp(rv.DecidedAt()))
	row("decided_by", dash(rv.DecidedBy()))
	row("reasons", dash(strings.Join(rv.Reasons(), ", ")))
	if rv.EscalationReason() != "" {
		row("escalated", fmt.Sprintf("%s at %s", rv.EscalationReason(), stamp(rv.EscalatedAt())))
	}
	if rv.Round() > 1 {
		row("round", fmt.Sprintf("%d (%d attempts in this round)", rv.Round(), rv.RoundAttempts()))
	}
	if cl := rv.CurrentClaim(); cl != nil {
		row("claim", fmt.Sprintf("%s until %s", cl.Moderator, stamp(cl.ExpiresAt)))
	}
	if hd := rv.Hold(); hd != nil {
		row("hold", fmt.Sprintf("by %s at %s%s", hd.By, stamp(hd.At), note(hd.Note)))
	}
	if a, _, started, timeout := rv.InFlight(); a > 0 {
		row("in_flight", fmt.Sprintf("attempt %d since %s, timeout %s", a, stamp(started), timeout))
	}
	if votes := rv.Approvals(); len(votes) > 0 && rv.State() == domain.StateManualReview {
		var parts []string
		for d, names := range votes {
			parts = append(parts, fmt.Sprintf("%s: %s", d, strings.Join(names, ", ")))
		}
		sort.Strings(parts)
		row("votes", fmt.Sprintf("%s (%d needed)", strings.Join(parts, "; "), rv.Policy().RequiredApprovals()))
	}
	var chain *ledger.ChainError
	switch {
	case r.Chain == nil:
		row("hash_chain", "intact")
	case errors.As(r.Chain, &chain):
		row("hash_chain", fmt.Sprintf("BROKEN at revision %d: %s", chain.Revision, chain.Reason))
	default:
		row("hash_chain", "BROKEN: "+r.Chain.Error())
	}
	_ = tw.Flush()
	r.renderConflicts(ew)
	r.renderShadows(ew)
	return ew.err
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// errWriter keeps the first write error.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}
