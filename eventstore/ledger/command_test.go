package ledger_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/memstore"
)

// changeLog commits through a store and keeps the work changes it was
// given, one per append.
type changeLog struct {
	store   eventstore.Store
	changes []*ledger.WorkChange
}

func (c *changeLog) Commit(ctx context.Context, appends []eventstore.StreamAppend, changes []*ledger.WorkChange) ([]eventstore.StreamResult, error) {
	c.changes = append(c.changes, changes...)
	return c.store.AppendMulti(ctx, appends...)
}

// nextStep starts an attempt, or times out the one in flight: a command
// whose answer depends on the review as it stands. The start keeps the
// work record when withWork.
func nextStep(asked *int, withWork bool) ledger.Command {
	return func(rv *ledger.Snapshot, now time.Time) (ledger.Step, error) {
		*asked++
		if n, _, _, _ := rv.InFlight(); n != 0 {
			e, err := rv.TimeOutAttempt(domain.AttemptFailure{Attempt: n, Classification: domain.ClassDeadlineExceeded}, now)
			return ledger.Step{Events: []domain.Event{e}}, err
		}
		e, err := rv.StartAttempt(now)
		s := ledger.Step{Events: []domain.Event{e}}
		if withWork {
			s.Work = &ledger.WorkChange{Op: ledger.WorkKeep, ReviewID: rv.ID()}
		}
		return s, err
	}
}

// staleReview creates a review and moves it on behind the snapshot it
// returns.
func staleReview(t *testing.T, l *ledger.Ledger, id string) *ledger.Snapshot {
	t.Helper()
	ctx := context.Background()
	rv, err := l.Create(ctx, submitted(t, id), ledger.Actor{Name: "platform"})
	if err != nil {
		t.Fatal(err)
	}
	start, err := rv.StartAttempt(t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, rv, ledger.Actor{Name: "other"}, start); err != nil {
		t.Fatal(err)
	}
	return rv
}

func TestRunAsksOnceAndAnswersTheConflict(t *testing.T) {
	l := ledger.New(memstore.New())
	c := ledger.Commands{Ledger: l, Now: at1s}
	rv := staleReview(t, l, "cmd-run")
	asked := 0
	if _, _, err := c.Run(context.Background(), "cmd-run", rv, ledger.Actor{Name: "engine"}, nextStep(&asked, false)); !errors.Is(err, eventstore.ErrWrongExpectedVersion) {
		t.Fatalf("Run on a stale review = %v, want ErrWrongExpectedVersion", err)
	}
	if asked != 1 {
		t.Fatalf("the command was asked %d times, want once", asked)
	}
	if now, err := l.Load(context.Background(), "cmd-run"); err != nil || now.Version() != 1 {
		t.Fatalf("the review after the refused run: version %v (%v), want 1: nothing written", now.Version(), err)
	}
}

func TestCoordinateAsksAgainOnTheReviewAsItStands(t *testing.T) {
	l := ledger.New(memstore.New())
	c := ledger.Commands{Ledger: l, Now: at1s}
	rv := staleReview(t, l, "cmd-coord")
	asked := 0
	next, step, err := c.Coordinate(context.Background(), "cmd-coord", rv, ledger.Actor{Name: "mod"}, nextStep(&asked, false))
	if err != nil {
		t.Fatal(err)
	}
	if asked != 2 {
		t.Fatalf("the command was asked %d times, want twice (the stale review, then the stored one)", asked)
	}
	if _, ok := step.Events[0].(domain.AttemptTimedOut); !ok || next.Version() != 2 {
		t.Fatalf("the second answer wrote %T at version %d, want the in-flight attempt timed out at 2", step.Events[0], next.Version())
	}
}

func at1s() time.Time { return t0.Add(time.Second) }

// racedWriter loses every write to a concurrent append.
type racedWriter struct{ ledger.StepWriter }

func (racedWriter) Write(context.Context, *ledger.Snapshot, ledger.Actor, ledger.Step) (*ledger.Snapshot, error) {
	return nil, &eventstore.WrongExpectedVersionError{Stream: "review-x"}
}

func TestCoordinateGivesUpAfterItsTries(t *testing.T) {
	l := ledger.New(memstore.New())
	if _, err := l.Create(context.Background(), submitted(t, "cmd-raced"), ledger.Actor{Name: "platform"}); err != nil {
		t.Fatal(err)
	}
	c := ledger.Commands{Ledger: racedWriter{l}, Now: at1s}
	asked := 0
	_, _, err := c.Coordinate(context.Background(), "cmd-raced", nil, ledger.Actor{Name: "mod"}, nextStep(&asked, false))
	if !errors.Is(err, eventstore.ErrWrongExpectedVersion) || asked != ledger.CoordinationTries {
		t.Fatalf("Coordinate = %v after %d asks, want the conflict after %d", err, asked, ledger.CoordinationTries)
	}
}

func TestACommandsRefusalWritesNothing(t *testing.T) {
	l := ledger.New(memstore.New())
	if _, err := l.Create(context.Background(), submitted(t, "cmd-refused"), ledger.Actor{Name: "platform"}); err != nil {
		t.Fatal(err)
	}
	refused := errors.New("refused")
	asked := 0
	_, _, err := ledger.Commands{Ledger: l}.Coordinate(context.Background(), "cmd-refused", nil, ledger.Actor{Name: "mod"},
		func(*ledger.Snapshot, time.Time) (ledger.Step, error) { asked++; return ledger.Step{}, refused })
	if !errors.Is(err, refused) || asked != 1 {
		t.Fatalf("Coordinate = %v after %d asks, want the command's error after one", err, asked)
	}
	if rv, err := l.Load(context.Background(), "cmd-refused"); err != nil || rv.Version() != 0 {
		t.Fatalf("the review after a refusal: version %v (%v), want 0", rv.Version(), err)
	}
}

func TestTheStepsWorkChangeReachesTheCommitter(t *testing.T) {
	store := memstore.New()
	log := &changeLog{store: store}
	l := ledger.New(store, ledger.Options{Committer: log})
	ctx := context.Background()
	rv, err := l.Create(ctx, submitted(t, "cmd-work"), ledger.Actor{Name: "platform"})
	if err != nil {
		t.Fatal(err)
	}
	asked := 0
	if _, _, err := (ledger.Commands{Ledger: l, Now: at1s}).Run(ctx, "cmd-work", rv, ledger.Actor{Name: "engine"}, nextStep(&asked, true)); err != nil {
		t.Fatal(err)
	}
	if len(log.changes) != 2 || log.changes[0] != nil || log.changes[1] == nil || log.changes[1].ReviewID != "cmd-work" || log.changes[1].Op != ledger.WorkKeep {
		t.Fatalf("changes committed = %+v, want none with the create and the step's with the attempt", log.changes)
	}
	if !l.CommitsThrough(log) || l.CommitsThrough(&changeLog{store: store}) {
		t.Fatal("CommitsThrough does not tell the ledger's own committer from another")
	}
}
