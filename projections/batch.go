package projections

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/reviewledger/reviewledger/eventstore"
)

// batch is one read of the global order, decoded.
type batch struct {
	after, last eventstore.Position
	events      []event
	read        int // events read, including skipped ones
	skipped     int
	// more says events may follow last right now: the read was full, or
	// cut short at another group's checkpoint.
	more          bool
	first, lastAt time.Time // recorded times of the first and last event read
	err           error
}

// readBatch reads and decodes the batch after pos; an empty batch (read 0)
// when there are no events. With until set, the batch ends at the last
// event not after until (a laggard catching up with the checkpoint until),
// unless no event is that early.
func (r *Runner) readBatch(ctx context.Context, pos eventstore.Position, until *eventstore.Position) batch {
	recorded, err := r.cfg.Store.ReadAll(ctx, pos, r.cfg.BatchSize)
	if err != nil {
		return batch{err: fmt.Errorf("read ledger after %s: %w", pos, err)}
	}
	if len(recorded) == 0 {
		return batch{after: pos, last: pos}
	}
	more := len(recorded) == r.cfg.BatchSize
	if until != nil {
		n := 0
		for n < len(recorded) && !until.Less(recorded[n].Position) {
			n++
		}
		if n > 0 && n < len(recorded) {
			recorded, more = recorded[:n], true
		}
	}
	events, skipped, err := decode(ctx, r.policies, recorded)
	if err != nil {
		return batch{err: err}
	}
	last := recorded[len(recorded)-1]
	return batch{
		after: pos, last: last.Position, events: events, read: len(recorded), skipped: skipped,
		more: more, first: recorded[0].RecordedAt, lastAt: last.RecordedAt,
	}
}

// prefetch reads the batch after a position in the background, while the
// one before it commits.
type prefetch struct {
	after  eventstore.Position
	result chan batch
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (r *Runner) startPrefetch(ctx context.Context, after eventstore.Position) *prefetch {
	ctx, cancel := context.WithCancel(ctx)
	pf := &prefetch{after: after, result: make(chan batch, 1), cancel: cancel}
	pf.wg.Add(1)
	go func() {
		defer pf.wg.Done()
		pf.result <- r.readBatch(ctx, after, nil)
	}()
	return pf
}

// stop abandons the read and waits for its goroutine; nil is stopped.
func (pf *prefetch) stop() {
	if pf != nil {
		pf.cancel()
		pf.wg.Wait()
	}
}

// outcome is what one batch did to one projection.
type outcome struct {
	// applied counts the events the projection used; ignored those it had
	// no use for, which cost it no query.
	applied, ignored int
	// moved says the checkpoint was neither where the batch starts nor
	// inside it (a rebuild swapped tables in, another process advanced it)
	// or holds another version: nothing was done, stored is where it is.
	moved  bool
	stored checkpoint
}

// applyBatch applies b to the live tables of every one of ps and moves
// their checkpoints to the end of b: all in one transaction, or, for a
// full batch (BatchSize events read: the runner is at least that far
// behind) of customPlansFrom events or more, each projection in a
// transaction of its own, side by side (applyApart). A serving runner at
// the head reads fewer than BatchSize events a batch and keeps one
// transaction for all.
func (r *Runner) applyBatch(ctx context.Context, ps []projection, b batch) ([]outcome, error) {
	if len(ps) > 1 && b.read >= max(customPlansFrom, r.cfg.BatchSize) {
		return r.applyApart(ctx, ps, b)
	}
	return r.applyTogether(ctx, ps, b)
}

// applyApart applies b to each of ps in a transaction of its own, on
// connections of their own, side by side: a runner far behind (a catch-up
// from nothing) then writes every projection's rows at once, as a rebuild
// does, where one transaction would write them one after another. Each
// projection's rows still commit with its checkpoint. When one fails, the
// others commit all the same; the shared batch tries each member alone
// then (loop.apply), and finds nothing left to do for those at b's end.
func (r *Runner) applyApart(ctx context.Context, ps []projection, b batch) ([]outcome, error) {
	out := make([]outcome, len(ps))
	var g errgroup.Group // no shared context: one failing leaves the others to commit
	for i, p := range ps {
		g.Go(func() error {
			o, err := r.applyTogether(ctx, []projection{p}, b)
			if err != nil {
				return err
			}
			out[i] = o[0]
			return nil
		})
	}
	return out, g.Wait()
}

// applyTogether applies b to the live tables of every one of ps and moves
// their checkpoints to the end of b, all in one transaction.
//
// The checkpoint rows are locked first. A checkpoint where b starts takes
// the whole batch; one at an event of b takes what follows it (and one at
// b's end nothing), so applying a batch twice changes nothing; one
// anywhere else, or of another version, is moved and left as it is.
// Each projection is given only the events it uses. A batch of
// customPlansFrom events or more is planned for its arguments
// (planForArguments).
func (r *Runner) applyTogether(ctx context.Context, ps []projection, b batch) ([]outcome, error) {
	out := make([]outcome, len(ps))
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.name()
	}
	var sli *sliBatch
	err := pgx.BeginFunc(ctx, r.cfg.Pool, func(tx pgx.Tx) error {
		clear(out)
		sli = newSLIBatch()
		ctx := withSLI(ctx, sli)
		if b.read >= customPlansFrom {
			if err := planForArguments(ctx, tx); err != nil {
				return err
			}
		}
		cps, err := lockCheckpoints(ctx, tx, names)
		if err != nil {
			return err
		}
		var moved []progress
		for i, p := range ps {
			cp := cps[p.name()]
			events, n, ok := b.from(cp.position)
			if !ok || cp.version != p.version() {
				out[i] = outcome{moved: true, stored: cp}
				continue
			}
			if n == 0 {
				continue // already applied
			}
			used, ignored, err := applyUsed(ctx, tx, p, liveTables, events)
			if err != nil {
				return fmt.Errorf("projection %s: apply %d events after %s: %w", p.name(), len(events), cp.position, err)
			}
			out[i].applied, out[i].ignored = used, ignored
			moved = append(moved, progress{name: p.name(), n: int64(n)})
		}
		if len(moved) == 0 {
			return nil
		}
		if r.beforeCommit != nil {
			ns := make([]string, len(moved))
			for i, m := range moved {
				ns[i] = m.name
			}
			if err := r.beforeCommit(ctx, tx, ns); err != nil {
				return err
			}
		}
		return advance(ctx, tx, moved, b.last, b.lastAt)
	})
	if err != nil {
		return nil, fmt.Errorf("batch after %s for %v: %w", b.after, names, err)
	}
	// Committed: what the batch observed counts, once.
	r.sli.publish(sli)
	return out, nil
}

// from returns the events of b that follow a checkpoint at pos and how
// many events the checkpoint moves over to reach b's end; ok is false
// when pos is neither where b starts nor at one of its events.
func (b batch) from(pos eventstore.Position) (events []event, n int, ok bool) {
	switch {
	case pos == b.after:
		return b.events, b.read, true
	case pos == b.last:
		return nil, 0, true
	case !pos.Less(b.last) || pos.Less(b.after):
		return nil, 0, false
	}
	for i, e := range b.events {
		if e.position == pos {
			return b.events[i+1:], len(b.events) - i - 1, true
		}
	}
	return nil, 0, false
}
