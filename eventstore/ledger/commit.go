package ledger

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/reviewledger/reviewledger/eventstore"
)

// Committer writes one group commit.
type Committer interface {
	// Commit appends to every stream of appends whose expected revision
	// holds, and applies changes[i] if and only if appends[i] is written:
	// in the same transaction where the backend can, otherwise in an order
	// that never leaves a written stream without its effect's
	// preconditions (the Committer documents which). results[i] belongs to
	// appends[i]; changes[i] is nil when the append has none. An error is for the call as a
	// whole: any subset may have been written, and writing the same events
	// again is idempotent. An idempotent re-append (its events stored
	// already) is not written, but a Committer that only sees the store's
	// results cannot tell it from one that is, and may apply its change
	// again (memwork, pgwork's ordered committer): the Ledger never makes
	// one, every append's events having IDs of their own (a write left
	// unsure is learned with Landed, not made again).
	Commit(ctx context.Context, appends []eventstore.StreamAppend, changes []*WorkChange) ([]eventstore.StreamResult, error)
}

// storeCommitter writes through the store's AppendMulti; it applies no
// effects (the Ledger refuses them before they get here).
type storeCommitter struct{ store eventstore.Store }

func (c storeCommitter) Commit(ctx context.Context, appends []eventstore.StreamAppend, _ []*WorkChange) ([]eventstore.StreamResult, error) {
	return c.store.AppendMulti(ctx, appends...)
}

// GroupCommit shapes the batches of a Ledger. The zero value is the
// default.
//
// Appends that arrive while Flushes batches are being written wait and go
// together into the next batch, up to MaxBatch streams: the busier the
// ledger, the larger its batches, and an append that arrives while nothing
// is being written is written at once. With Window set, a batch that is
// smaller than MaxBatch and gathered while another batch was being written
// waits up to Window for more appends first: fewer, larger transactions
// for a little latency, paid only under load.
type GroupCommit struct {
	// MaxBatch bounds the streams of one batch. Default 256.
	MaxBatch int
	// Flushes is how many batches may be written at once. Default 1: on
	// the development machine (2 cores, PostgreSQL beside the service) one
	// batch at a time took the database 0.6 of the CPU per review that
	// four did, and the service more reviews a second, the batches being
	// larger (docs/changelog.md, the second pass); more may pay where the database is far
	// or has many cores.
	Flushes int
	// Window is how long a batch waits for more under load. Default 0.
	Window time.Duration
	// Timeout bounds the writing of one batch. Default 30s.
	Timeout time.Duration
}

func (g *GroupCommit) setDefaults() {
	if g.MaxBatch <= 0 {
		g.MaxBatch = 256
	}
	if g.Flushes <= 0 {
		g.Flushes = 1
	}
	if g.Timeout <= 0 {
		g.Timeout = 30 * time.Second
	}
}

// groupCommit coalesces concurrent appends into multi-stream appends.
type groupCommit struct {
	commit Committer
	cfg    GroupCommit

	mu        sync.Mutex
	queue     []*request
	writing   int             // writers running
	writingTo map[string]bool // streams of the batches being written

	statsMu  sync.Mutex
	stats    Stats
	inFlight map[*[]*request]time.Time // batches being written, since when
}

type request struct {
	append eventstore.StreamAppend
	change *WorkChange
	done   chan outcome // buffered: the writer never waits for the caller
}

type outcome struct {
	result eventstore.AppendResult
	err    error
}

func newGroupCommit(c Committer, cfg GroupCommit) *groupCommit {
	cfg.setDefaults()
	return &groupCommit{commit: c, cfg: cfg}
}

// append queues one stream's append and waits for its outcome. When ctx
// ends first, an append still queued is withdrawn (nothing written); one
// already being written may still be.
func (g *groupCommit) append(ctx context.Context, a eventstore.StreamAppend, change *WorkChange) (eventstore.AppendResult, error) {
	r := &request{append: a, change: change, done: make(chan outcome, 1)}
	g.mu.Lock()
	g.queue = append(g.queue, r)
	start := g.writing < g.cfg.Flushes
	if start {
		g.writing++
	}
	g.mu.Unlock()
	if start {
		go g.write()
	}
	select {
	case o := <-r.done:
		return o.result, o.err
	case <-ctx.Done():
		if g.withdraw(r) {
			return eventstore.AppendResult{}, ctx.Err()
		}
		select {
		case o := <-r.done: // answered as the context ended
			return o.result, o.err
		default:
		}
		return eventstore.AppendResult{}, errUnsure{err: fmt.Errorf("%w while the append was being written", ctx.Err()), done: r.done}
	}
}

func (g *groupCommit) withdraw(r *request) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, q := range g.queue {
		if q == r {
			g.queue = append(g.queue[:i], g.queue[i+1:]...)
			return true
		}
	}
	return false
}

// write writes batches until the queue is empty. The first batch of a
// writer is written at once; a later one gathered while the one before was
// being written (under load), and with Window set waits for more first,
// as does one gathered while another writer writes. The appends waited for
// stay queued meanwhile, so a caller whose context ends can still
// withdraw its own.
func (g *groupCommit) write() {
	loaded := false
	for {
		if g.cfg.Window > 0 && g.gathering(loaded) {
			t := time.NewTimer(g.cfg.Window)
			<-t.C
		}
		batch := g.take()
		if len(batch) == 0 {
			return
		}
		g.flush(batch)
		g.done(batch)
		loaded = true
	}
}

// gathering reports whether a batch is to wait for more: some appends
// queued, fewer than MaxBatch, and loaded or another writer writing.
func (g *groupCommit) gathering(loaded bool) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.queue) > 0 && len(g.queue) < g.cfg.MaxBatch && (loaded || g.writing > 1)
}

// take moves queued requests into a batch, up to MaxBatch, at most one per
// stream, and none for a stream in a batch another writer is writing: a
// later append to a stream waits for the batch holding the earlier one,
// so appends to one stream are written in the order they were made. With
// nothing to take, the writer retires (a writer writing the stream an
// append waits for takes it next).
func (g *groupCommit) take() []*request {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.writingTo == nil {
		g.writingTo = map[string]bool{}
	}
	var batch []*request
	rest := g.queue[:0]
	for _, r := range g.queue {
		if len(batch) < g.cfg.MaxBatch && !g.writingTo[r.append.Stream] {
			g.writingTo[r.append.Stream] = true
			batch = append(batch, r)
			continue
		}
		rest = append(rest, r)
	}
	clear(g.queue[len(rest):])
	g.queue = rest
	if len(batch) == 0 {
		g.writing--
	}
	return batch
}

// done records that batch is no longer being written.
func (g *groupCommit) done(batch []*request) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, r := range batch {
		delete(g.writingTo, r.append.Stream)
	}
}

func (g *groupCommit) flush(batch []*request) {
	appends := make([]eventstore.StreamAppend, len(batch))
	changes := make([]*WorkChange, len(batch))
	for i, r := range batch {
		appends[i], changes[i] = r.append, r.change
	}
	ctx, cancel := context.WithTimeout(context.Background(), g.cfg.Timeout)
	g.begin(&batch)
	results, err := g.commit.Commit(ctx, appends, changes)
	cancel()
	if err == nil && len(results) != len(batch) {
		err = fmt.Errorf("ledger: committer answered %d results for %d appends", len(results), len(batch))
	}
	g.count(&batch, err)
	for i, r := range batch {
		if err != nil {
			r.done <- outcome{err: errUnsure{err: err}} // any subset may be written
			continue
		}
		r.done <- outcome{result: results[i].AppendResult, err: results[i].Err}
	}
}

// Stats counts a ledger's group commits, and says what they do now.
type Stats struct {
	Batches  int64   // batches written (or failed)
	Appends  int64   // stream appends in them
	Failures int64   // batches whose write failed as a whole
	Seconds  float64 // time spent writing them
	// Waiting is how many appends wait for a batch now; Writing how long
	// the oldest batch being written now has been (0: none). With one
	// batch at a time (GroupCommit.Flushes 1), a batch that does not
	// return holds back every append of the process until its Timeout:
	// these two show it.
	Waiting int
	Writing time.Duration
}

// Stats returns the counts so far and the state now.
func (l *Ledger) Stats() Stats { return l.group.snapshot(time.Now()) }

func (g *groupCommit) snapshot(now time.Time) Stats {
	g.mu.Lock()
	waiting := len(g.queue)
	g.mu.Unlock()
	g.statsMu.Lock()
	defer g.statsMu.Unlock()
	st := g.stats
	st.Waiting = waiting
	for _, since := range g.inFlight {
		st.Writing = max(st.Writing, now.Sub(since))
	}
	return st
}

// begin records that batch is being written from now on.
func (g *groupCommit) begin(batch *[]*request) {
	g.statsMu.Lock()
	defer g.statsMu.Unlock()
	if g.inFlight == nil {
		g.inFlight = map[*[]*request]time.Time{}
	}
	g.inFlight[batch] = time.Now()
}

// count records that batch was written, or failed with err.
func (g *groupCommit) count(batch *[]*request, err error) {
	g.statsMu.Lock()
	defer g.statsMu.Unlock()
	g.stats.Batches++
	g.stats.Appends += int64(len(*batch))
	g.stats.Seconds += time.Since(g.inFlight[batch]).Seconds()
	delete(g.inFlight, batch)
	if err != nil {
		g.stats.Failures++
	}
}
