package audit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

// ConflictStep is one conflicting completion of a replayed review: a late
// or duplicate finding that was refused and changed nothing. It comes from
// the review's conflict stream, not from its timeline.
type ConflictStep struct {
	// Seq is the event's revision in the conflict stream.
	Seq     uint64
	At      time.Time
	Elapsed time.Duration // At minus the submission time
	Attempt int           // 0 when the completion named none
	Source  string
	Reason  domain.ConflictReason
	// Detail is the finding's state, where the review stood and why.
	Detail string
	Actor  string
}

// AddConflicts adds the review's conflicting completions (up to AsOf) to
// the replay, shown after the timeline. Their hash chain is checked apart
// from the review's.
func (r *Replay) AddConflicts(log *ledger.ConflictLog) {
	entries, later := upTo(log.Events, r.AsOf, conflictTime)
	r.LaterConflicts = later
	r.Conflicts = make([]ConflictStep, 0, len(entries))
	shown := *log
	shown.Events = entries
	r.ConflictChain = shown.Verify()
	submitted := r.Review.SubmittedAt()
	for _, e := range entries {
		c, _ := e.Event.(domain.ConflictingCompletionRecorded)
		at := conflictTime(e)
		detail := fmt.Sprintf("review %s at version %d", c.ReviewState, c.ReviewVersion)
		if c.State != "" {
			detail = string(c.State) + "; " + detail
		}
		if c.Detail != "" {
			detail += " (" + c.Detail + ")"
		}
		r.Conflicts = append(r.Conflicts, ConflictStep{
			Seq: e.Revision, At: at, Elapsed: at.Sub(submitted).Round(time.Millisecond), Attempt: c.Attempt,
			Source: c.Source, Reason: c.Reason, Detail: detail, Actor: e.Metadata.Actor,
		})
	}
}

// upTo returns the entries whose time (at) is not after asOf, all of
// them when asOf is zero, and how many come after.
func upTo(entries []ledger.Entry, asOf time.Time, at func(ledger.Entry) time.Time) ([]ledger.Entry, int) {
	if asOf.IsZero() {
		return entries, 0
	}
	n := 0
	for n < len(entries) && !at(entries[n]).After(asOf) {
		n++
	}
	return entries[:n], len(entries) - n
}

func conflictTime(e ledger.Entry) time.Time {
	if c, ok := e.Event.(domain.ConflictingCompletionRecorded); ok && !c.At.IsZero() {
		return c.At
	}
	return e.RecordedAt
}

// renderConflicts writes the conflicting completions, when they were read.
func (r *Replay) renderConflicts(w io.Writer) {
	if r.Conflicts == nil {
		return
	}
	later := ""
	if r.LaterConflicts > 0 {
		later = fmt.Sprintf(" (%d later not shown)", r.LaterConflicts)
	}
	if len(r.Conflicts) == 0 {
		fmt.Fprintf(w, "\nconflicting completions: none%s\n", later)
		return
	}
	fmt.Fprintf(w, "\nconflicting completions: %d, refused, they changed nothing%s\n", len(r.Conflicts), later)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tTIME\tELAPSED\tATTEMPT\tSOURCE\tREASON\tDETAIL\tACTOR")
	for _, c := range r.Conflicts {
		attempt := "-"
		if c.Attempt > 0 {
			attempt = fmt.Sprint(c.Attempt)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.Seq, stamp(c.At), c.Elapsed, attempt, c.Source, c.Reason, c.Detail, dash(c.Actor))
	}
	_ = tw.Flush()
	chain := "intact"
	if r.ConflictChain != nil {
		chain = "BROKEN: " + strings.TrimSpace(r.ConflictChain.Error())
	}
	fmt.Fprintf(w, "  hash_chain: %s\n", chain)
}

// ConflictHistories reads conflict streams (*ledger.Ledger). When the
// Verifier's Histories implements it, conflict streams are verified too.
type ConflictHistories interface {
	// Conflicts reads a review's conflict stream; an empty log when it has
	// none.
	Conflicts(ctx context.Context, reviewID string) (*ledger.ConflictLog, error)
}

// ShadowHistories reads shadow streams (*ledger.Ledger). When the
// Verifier's Histories implements it, shadow streams are verified too.
type ShadowHistories interface {
	// Shadows reads a review's shadow stream; an empty log when it has
	// none.
	Shadows(ctx context.Context, reviewID string) (*ledger.SideLog, error)
}

// sideStream is one kind of a review's side streams: its stream name's
// prefix, how to read one, and what its events are called in damage.
type sideStream struct {
	prefix string
	read   func(ctx context.Context, reviewID string) (*ledger.SideLog, error)
	what   string // plural, as in "conflicting completions"
	one    string // singular, as in "a conflicting completion"
}

// sideStreams returns the side streams the Verifier's Histories can read.
func (v *Verifier) sideStreams() []sideStream {
	var out []sideStream
	if h, ok := v.Histories.(ConflictHistories); ok {
		out = append(out, sideStream{domain.ConflictStreamName(""), h.Conflicts, "conflicting completions", "a conflicting completion"})
	}
	if h, ok := v.Histories.(ShadowHistories); ok {
		out = append(out, sideStream{domain.ShadowStreamName(""), h.Shadows, "shadow observations", "a shadow observation"})
	}
	return out
}

// checkSides verifies the hash chains of the side streams (conflicting
// completions, shadow observations) of one review (reviewID not empty) or
// of every review that has them (listed by streams), adding damage to rep. Side
// streams are not review streams: they never count in rep.Reviews and are
// never anchored.
func (v *Verifier) checkSides(ctx context.Context, reviewID string, streams *lister, rep *Report) error {
	for _, side := range v.sideStreams() {
		var err error
		if reviewID != "" {
			err = v.checkSide(ctx, side, []string{reviewID}, rep)
		} else {
			err = streams.pages(ctx, side.prefix, v.chunkSize(), func(ids []string) error {
				return v.checkSide(ctx, side, ids, rep)
			})
		}
		if err != nil {
			return fmt.Errorf("verify %s: %w", side.what, err)
		}
	}
	return nil
}

func (v *Verifier) checkSide(ctx context.Context, side sideStream, ids []string, rep *Report) error {
	for _, id := range ids {
		log, err := side.read(ctx, id)
		switch {
		case errors.Is(err, domain.ErrCorruptHistory):
			rep.Damaged = append(rep.Damaged, Damage{ReviewID: id, Revision: revisionOf(err),
				Reason: side.one + " cannot be read (altered): " + err.Error()})
			continue
		case err != nil:
			return err
		}
		rep.Events += len(log.Events)
		var chain *ledger.ChainError
		if err := log.Verify(); errors.As(err, &chain) {
			rep.Damaged = append(rep.Damaged, Damage{ReviewID: id, Revision: chain.Revision,
				Reason: side.what + ": " + chain.Reason})
		} else if err != nil {
			return err
		}
	}
	return nil
}
