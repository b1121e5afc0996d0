package audit

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

// ShadowStep is one shadow provider's observation of a replayed review:
// what it answered, which decided nothing. It comes from the review's
// shadow stream, not from its timeline.
type ShadowStep struct {
	// Seq is the event's revision in the shadow stream.
	Seq      uint64
	At       time.Time     // when the shadow's call ended
	Elapsed  time.Duration // At minus the submission time
	Provider string
	Outcome  domain.ShadowOutcome
	// Detail is the finding's state and reasons, or why there was none.
	Detail  string
	Latency time.Duration
}

// AddShadows adds the review's shadow observations (those whose call
// ended by AsOf) to the replay, shown after the timeline when there are
// any. Their hash chain is checked apart from the review's.
func (r *Replay) AddShadows(log *ledger.SideLog) {
	entries, later := upTo(log.Events, r.AsOf, shadowEnd)
	r.LaterShadows = later
	shown := *log
	shown.Events = entries
	r.ShadowChain = shown.Verify()
	r.Shadows = make([]ShadowStep, 0, len(entries))
	submitted := r.Review.SubmittedAt()
	for _, e := range entries {
		o, _ := e.Event.(domain.ShadowObserved)
		detail := string(o.State)
		if len(o.Reasons) > 0 {
			detail += " (" + strings.Join(o.Reasons, ", ") + ")"
		}
		if o.Outcome != domain.ShadowFinding {
			detail = string(o.Classification)
			if o.Detail != "" {
				detail += ": " + o.Detail
			}
		}
		at := shadowEnd(e)
		r.Shadows = append(r.Shadows, ShadowStep{Seq: e.Revision, At: at, Elapsed: at.Sub(submitted).Round(time.Millisecond),
			Provider: o.Provider, Outcome: o.Outcome, Detail: detail, Latency: time.Duration(o.LatencyMS) * time.Millisecond})
	}
}

// shadowEnd is when a shadow's call ended: its start plus its latency.
func shadowEnd(e ledger.Entry) time.Time {
	if o, ok := e.Event.(domain.ShadowObserved); ok && !o.StartedAt.IsZero() {
		return o.StartedAt.Add(time.Duration(o.LatencyMS) * time.Millisecond)
	}
	return e.RecordedAt
}

// renderShadows writes the shadow observations, when there are any.
func (r *Replay) renderShadows(w io.Writer) {
	if len(r.Shadows) == 0 && r.LaterShadows == 0 {
		return
	}
	later := ""
	if r.LaterShadows > 0 {
		later = fmt.Sprintf(" (%d later not shown)", r.LaterShadows)
	}
	fmt.Fprintf(w, "\nshadow observations: %d, for comparison, they decided nothing%s\n", len(r.Shadows), later)
	if len(r.Shadows) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tTIME\tELAPSED\tPROVIDER\tOUTCOME\tLATENCY\tDETAIL")
	for _, s := range r.Shadows {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Seq, stamp(s.At), s.Elapsed, s.Provider, s.Outcome, s.Latency, dash(s.Detail))
	}
	_ = tw.Flush()
	chain := "intact"
	if r.ShadowChain != nil {
		chain = "BROKEN: " + strings.TrimSpace(r.ShadowChain.Error())
	}
	fmt.Fprintf(w, "  hash_chain: %s\n", chain)
}
