package projections

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/clock"
)

// The shared batch. A process serves every projection whose lock it holds
// in one loop: the members at the same checkpoint form a group, and each
// batch is read once and applied to the whole group in one transaction
// that also moves every member's checkpoint. In the common case (one
// process holding every lock, every projection at the same position and
// version) there is one group, so one read and one transaction per batch.
//
// A member behind the others (just rebuilt, joined late, or left behind
// by a failed batch) is a laggard: its group reads one batch of its own
// per turn of the loop, cut at the checkpoint of the group ahead of it,
// while the group ahead goes on. When a cut batch brings it to that
// checkpoint it joins the group ahead and takes that group's batch in the
// same turn (waiting for the next, it would find the group ahead one batch
// further on, for as long as the load lasts), and the two are one from
// then on. The laggard catches up as long as it applies faster than the
// ledger grows, as a projection on its own has to.

// member is a projection this process runs, with its lock and where its
// checkpoint stands.
type member struct {
	p    projection
	lock *pgx.Conn
	pos  eventstore.Position
	// done receives, once, why the loop let the member go (Run only).
	done chan error

	events, ignored, skipped prometheus.Counter
	lagEvents, lagSeconds    prometheus.Gauge
	batch                    prometheus.Observer
}

func (r *Runner) newMember(p projection, lock *pgx.Conn, pos eventstore.Position) *member {
	n, m := p.name(), r.metrics
	return &member{
		p: p, lock: lock, pos: pos,
		events: m.events.WithLabelValues(n), ignored: m.ignored.WithLabelValues(n), skipped: m.skipped.WithLabelValues(n),
		lagEvents: m.lagEvents.WithLabelValues(n), lagSeconds: m.lagSeconds.WithLabelValues(n), batch: m.batch.WithLabelValues(n),
	}
}

// loop serves its members until ctx is done or, without follow, until
// every member has caught up.
type loop struct {
	r       *Runner
	members []*member
	// joins brings members whose lock was just taken (Run); nil otherwise.
	joins <-chan *member
	// follow keeps the loop waiting for new events once caught up.
	follow bool
	// leave is told each member the loop lets go and why; a non-nil
	// return ends the loop with that error.
	leave func(m *member, err error) error

	ahead    *prefetch
	lastPing time.Time
}

// add makes m a member.
func (l *loop) add(m *member) { l.members = append(l.members, m) }

// drop lets m go with err.
func (l *loop) drop(m *member, err error) error {
	l.members = slices.DeleteFunc(l.members, func(x *member) bool { return x == m })
	return l.leave(m, err)
}

// dropAll lets every member go with err.
func (l *loop) dropAll(err error) error {
	for len(l.members) > 0 {
		if lerr := l.drop(l.members[0], err); lerr != nil {
			return lerr
		}
	}
	return nil
}

func (l *loop) run(ctx context.Context) (err error) {
	defer func() {
		l.ahead.stop()
		if ctx.Err() != nil {
			err = ctx.Err()
			for _, m := range l.members {
				if m.done != nil {
					m.done <- err
				}
			}
			l.members = nil
		}
	}()
	for ctx.Err() == nil {
		l.admit()
		if len(l.members) == 0 {
			if l.joins == nil {
				return nil
			}
			select {
			case m := <-l.joins:
				l.add(m)
			case <-ctx.Done():
			}
			continue
		}
		if err := l.ping(ctx); err != nil {
			return err
		}
		if len(l.members) == 0 {
			continue // every lock was lost
		}
		progressed, more, err := l.step(ctx)
		switch {
		case err != nil: // a read failed, which no member can get past (or CatchUp gives up)
		case progressed && !more && l.follow && l.r.cfg.Settle > 0:
			// At the head: let the next events gather into one batch.
			_ = clock.Sleep(ctx, l.r.cfg.Settle)
			continue
		case progressed:
			continue
		case !l.follow:
			l.caughtUp()
			return nil
		default:
			l.caughtUp()
			err = l.wait(ctx)
		}
		if err != nil && ctx.Err() == nil {
			if err := l.dropAll(err); err != nil {
				return err
			}
		}
	}
	return ctx.Err()
}

// admit adds the members waiting to join, without waiting for any.
func (l *loop) admit() {
	for {
		select {
		case m := <-l.joins:
			l.add(m)
		default:
			return
		}
	}
}

// ping checks, every few poll intervals, that each member's lock
// connection is alive (the lock lives as long as its session), and lets
// go the members whose is not.
func (l *loop) ping(ctx context.Context) error {
	if time.Since(l.lastPing) < max(l.r.cfg.PollInterval, 100*time.Millisecond)*5 {
		return nil
	}
	l.lastPing = time.Now()
	for _, m := range slices.Clone(l.members) {
		if m.lock == nil {
			continue
		}
		if err := m.lock.Ping(ctx); err != nil && ctx.Err() == nil {
			if err := l.drop(m, fmt.Errorf("projection %s: lock connection lost: %w", m.p.name(), err)); err != nil {
				return err
			}
		}
	}
	return nil
}

// step gives every group one batch, the furthest behind first (a group
// its batch brings to the checkpoint of the group ahead takes that
// group's batch too), and reports whether any applied one and whether any
// group's batch left it short of the head (a group that wholly joined the
// group ahead defers to that group's read).
func (l *loop) step(ctx context.Context) (progressed, more bool, err error) {
	groups := groupByPosition(l.members)
	for i, g := range groups {
		var until *eventstore.Position
		if i+1 < len(groups) {
			next := groups[i+1][0].pos
			until = &next
		}
		b := l.next(ctx, g[0].pos, until)
		if b.err != nil {
			return progressed, more, b.err
		}
		if b.read == 0 {
			continue
		}
		if err := l.apply(ctx, g, b); err != nil {
			return progressed, more, err
		}
		progressed = true
		if until != nil {
			var all bool
			if groups[i+1], all = l.join(g, groups[i+1]); all {
				continue // the group ahead's read says whether more follow
			}
		}
		more = more || b.more
	}
	return progressed, more, nil
}

// join adds to the group ahead the members of g that its batch brought to
// that group's checkpoint, so that they share its batch in this same
// turn, and says whether all of g joined. Left for the next turn, they
// would stay one batch behind for as long as the group ahead finds new
// events: under steady load every event would be read and applied twice.
func (l *loop) join(g, ahead []*member) (_ []*member, all bool) {
	all = true
	for _, m := range g {
		if !slices.Contains(l.members, m) {
			continue // let go by the batch
		}
		if m.pos != ahead[0].pos {
			all = false
			continue
		}
		ahead = append(ahead, m)
	}
	return ahead, all
}

// groupByPosition returns the members grouped by checkpoint, in global
// order.
func groupByPosition(ms []*member) [][]*member {
	sorted := slices.Clone(ms)
	slices.SortStableFunc(sorted, func(a, b *member) int {
		switch {
		case a.pos == b.pos:
			return 0
		case a.pos.Less(b.pos):
			return -1
		}
		return 1
	})
	var groups [][]*member
	for _, m := range sorted {
		if n := len(groups); n > 0 && groups[n-1][0].pos == m.pos {
			groups[n-1] = append(groups[n-1], m)
			continue
		}
		groups = append(groups, []*member{m})
	}
	return groups
}

// next returns the batch after pos, cut at until. The leading group's
// batches (until nil) are read one ahead while the previous one commits.
func (l *loop) next(ctx context.Context, pos eventstore.Position, until *eventstore.Position) batch {
	if until != nil {
		return l.r.readBatch(ctx, pos, until)
	}
	var b batch
	if pf := l.ahead; pf != nil && pf.after == pos {
		b = <-pf.result
		pf.stop()
	} else {
		pf.stop()
		b = l.r.readBatch(ctx, pos, nil)
	}
	l.ahead = nil
	if b.err == nil && b.more {
		l.ahead = l.r.startPrefetch(ctx, b.last)
	}
	return b
}

// apply applies b to the group g in one transaction. When that fails,
// each member tries the batch alone, so that one failing projection does
// not hold back the others: those that fail alone leave the loop.
func (l *loop) apply(ctx context.Context, g []*member, b batch) error {
	now := l.r.cfg.Now()
	for _, m := range g {
		m.lagEvents.Set(float64(b.read))
		m.lagSeconds.Set(max(0, now.Sub(b.first).Seconds()))
	}
	ps := make([]projection, len(g))
	for i, m := range g {
		ps[i] = m.p
	}
	start := time.Now()
	out, err := l.r.applyBatch(ctx, ps, b)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if len(g) == 1 {
			return l.drop(g[0], err)
		}
		for _, m := range g {
			if err := l.apply(ctx, []*member{m}, b); err != nil {
				return err
			}
		}
		return nil
	}
	took := time.Since(start).Seconds()
	for i, m := range g {
		o := out[i]
		if o.moved {
			if o.stored.version != m.p.version() {
				if err := l.drop(m, fmt.Errorf("projection %s: stored version %d: %w", m.p.name(), o.stored.version, errCheckpointMoved)); err != nil {
					return err
				}
				continue
			}
			m.pos = o.stored.position // read on from where it is
			continue
		}
		m.pos = b.last
		m.batch.Observe(took)
		m.events.Add(float64(o.applied))
		m.ignored.Add(float64(o.ignored))
		m.skipped.Add(float64(b.skipped))
		if !b.more {
			m.lagEvents.Set(0)
			m.lagSeconds.Set(0)
		}
	}
	return nil
}

// caughtUp records that every member has applied all there is.
func (l *loop) caughtUp() {
	for _, m := range l.members {
		m.lagEvents.Set(0)
		m.lagSeconds.Set(0)
	}
}

// wait waits for events after the leading checkpoint, PollInterval at
// most, so that members joining meanwhile wait no longer than that.
func (l *loop) wait(ctx context.Context) error {
	groups := groupByPosition(l.members)
	if len(groups) == 0 {
		return nil
	}
	pos := groups[len(groups)-1][0].pos
	wctx, cancel := context.WithTimeout(ctx, l.r.cfg.PollInterval)
	defer cancel()
	err := l.r.cfg.Store.WaitForEvents(wctx, pos)
	if err != nil && ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("wait for events after %s: %w", pos, err)
	}
	return nil
}
