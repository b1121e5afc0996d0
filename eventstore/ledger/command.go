package ledger

import (
	"context"
	"errors"
	"time"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore"
)

// A Command is one command on a review: given the review as it stands and
// the time, what it writes. An error refuses the command and nothing is
// written; the error is returned as it is.
type Command func(rv *Snapshot, now time.Time) (Step, error)

// Step is what a command writes to one review: its events, and the change
// they make to the review's work record, applied if and only if they are
// written.
type Step struct {
	Events []domain.Event
	// Work is the change to the work record; nil for none (a moderator's
	// claim, hold or decision on a review off the automated path).
	Work *WorkChange
}

// CoordinationTries bounds how often Coordinate asks a command: the first
// time and twice again after another append to the review won the race.
const CoordinationTries = 3

// StepWriter is what Commands needs of a ledger (*Ledger).
type StepWriter interface {
	// Load rebuilds a review; domain.ErrReviewNotFound when it has none.
	Load(ctx context.Context, reviewID string) (*Snapshot, error)
	// Write appends s at rv's version (see Ledger.Write).
	Write(ctx context.Context, rv *Snapshot, by Actor, s Step) (*Snapshot, error)
}

// Commands is the application service every writer of a review's events
// in the service goes through: load the review, ask the domain command
// what it writes, append that at the version loaded with the change to
// the work record, and retry only what is a coordination conflict. Its
// users are the engine (an attempt's step, a callback's finding, a
// requeue), the HTTP handlers (a moderator's claim, release, hold and
// decision) and the projector's sweeper (a claim whose lease ran out).
// Submissions create a stream instead (Ledger.CreateThen): they expect
// none. The bench's growth of a ledger, which plans every step itself,
// calls Write, where Run ends, directly.
type Commands struct {
	Ledger StepWriter
	// Now is the commands' clock. Default time.Now.
	Now func() time.Time
}

func (c Commands) now() time.Time {
	if c.Now == nil {
		return time.Now()
	}
	return c.Now()
}

// Run asks cmd once, on rv or, when rv is nil, on the review loaded now,
// and writes its step at that version. When the review moved meanwhile
// the error matches eventstore.ErrWrongExpectedVersion and cmd is not
// asked again: for what Run carries (a provider's finding, a decision on
// the version a moderator saw) the conflict is the answer. It returns the
// review as the step left it, and the step.
func (c Commands) Run(ctx context.Context, reviewID string, rv *Snapshot, by Actor, cmd Command) (*Snapshot, Step, error) {
	if rv == nil {
		var err error
		if rv, err = c.Ledger.Load(ctx, reviewID); err != nil {
			return nil, Step{}, err
		}
	}
	s, err := cmd(rv, c.now())
	if err != nil {
		return nil, Step{}, err
	}
	next, err := c.Ledger.Write(ctx, rv, by, s)
	if err != nil {
		return nil, Step{}, err
	}
	return next, s, nil
}

// Coordinate is Run for the commands that coordinate moderators (a claim,
// a release, a hold, a decision whose expected version is the review's
// and not its stream's): when another append won the race, cmd is asked
// again on the review as it then stands, CoordinationTries times in all,
// so that the loser gets the answer the winner's event calls for
// (claimed by another, not held, …) rather than a bare conflict.
func (c Commands) Coordinate(ctx context.Context, reviewID string, rv *Snapshot, by Actor, cmd Command) (*Snapshot, Step, error) {
	for try := 1; ; try++ {
		next, s, err := c.Run(ctx, reviewID, rv, by, cmd)
		if !errors.Is(err, eventstore.ErrWrongExpectedVersion) || try == CoordinationTries {
			return next, s, err
		}
		rv = nil
	}
}

// Write appends s's events to a loaded review at its version, as Append
// does, with s's work change applied if and only if they are written. A
// step of no events writes nothing and applies nothing.
func (l *Ledger) Write(ctx context.Context, rv *Snapshot, by Actor, s Step) (*Snapshot, error) {
	return l.appendTo(ctx, rv, by, s.Work, s.Events...)
}
