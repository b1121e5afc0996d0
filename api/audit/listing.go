package audit

import (
	"context"
	"fmt"
	"hash/maphash"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/reviewledger/reviewledger/eventstore"
)

// StreamLister lists the names of the streams starting with prefix that
// sort after after, in the store's name order, at most limit of them
// (*pgstore.Store): the verifier lists the ledger a chunk at a time, so
// that what it holds does not grow with the ledger. Stores without it are
// listed by reading their global order (ReadAll) once.
type StreamLister interface {
	Streams(ctx context.Context, prefix, after string, limit int) ([]string, error)
}

// ReviewLister is a witness that lists the reviews it knows without their
// marks (PGAnchors, PGSummaries). After the listed reviews are checked,
// the verifier looks among them, one at a time, for reviews the ledger no
// longer lists; a witness without it gives every mark it holds at once
// (Marks with nil).
type ReviewLister interface {
	ReviewIDs(ctx context.Context, each func(id string) error) error
}

// lister lists a store's streams for one verification.
type lister struct {
	store eventstore.Store
	// Without a StreamLister every stream name, read once.
	once  sync.Once
	names []string
	err   error
}

// pages calls each with the IDs of the streams named prefix+ID, size at a
// time, in the store's name order.
func (l *lister) pages(ctx context.Context, prefix string, size int, each func(ids []string) error) error {
	sl, ok := l.store.(StreamLister)
	if !ok {
		return l.pagesByReading(ctx, prefix, size, each)
	}
	after := ""
	for {
		names, err := sl.Streams(ctx, prefix, after, size)
		if err != nil {
			return err
		}
		if len(names) == 0 {
			return nil
		}
		ids := make([]string, len(names))
		for i, name := range names {
			ids[i] = strings.TrimPrefix(name, prefix)
		}
		if err := each(ids); err != nil {
			return err
		}
		if len(names) < size {
			return nil
		}
		after = names[len(names)-1]
	}
}

// pagesByReading is pages for a store that cannot list its streams: every
// event is read once, for every prefix.
func (l *lister) pagesByReading(ctx context.Context, prefix string, size int, each func(ids []string) error) error {
	l.once.Do(func() { l.names, l.err = readStreamNames(ctx, l.store) })
	if l.err != nil {
		return l.err
	}
	var ids []string
	for _, name := range l.names {
		if id, ok := strings.CutPrefix(name, prefix); ok {
			ids = append(ids, id)
		}
	}
	for chunk := range slices.Chunk(ids, size) {
		if err := each(chunk); err != nil {
			return err
		}
	}
	return nil
}

// readStreamNames returns the name of every stream of store, sorted, read
// from its global order.
func readStreamNames(ctx context.Context, store eventstore.Store) ([]string, error) {
	seen := make(map[string]bool)
	var names []string
	pos := eventstore.Start
	for {
		batch, err := store.ReadAll(ctx, pos, 1000)
		if err != nil {
			return nil, fmt.Errorf("list streams: %w", err)
		}
		if len(batch) == 0 {
			break
		}
		for _, e := range batch {
			if !seen[e.Stream] {
				seen[e.Stream] = true
				names = append(names, e.Stream)
			}
		}
		pos = batch[len(batch)-1].Position
	}
	slices.Sort(names)
	return names, nil
}

// idSet is the set of the reviews listed, held as 64-bit hashes under a
// key drawn for each verification: 8 bytes a review, where the IDs
// themselves would take some 60. A review the ledger no longer lists is
// taken for a listed one only when its hash under that key equals one of
// theirs, a chance of one in 2^64 for each listed review, which no
// one who removes a stream can aim at without the key.
type idSet struct {
	seed maphash.Seed
	sums []uint64
}

func newIDSet() *idSet { return &idSet{seed: maphash.MakeSeed()} }

func (s *idSet) add(ids []string) {
	for _, id := range ids {
		s.sums = append(s.sums, maphash.String(s.seed, id))
	}
}

// seal sorts the set once every listed review is added; has needs it.
func (s *idSet) seal() { slices.Sort(s.sums) }

func (s *idSet) has(id string) bool {
	_, ok := slices.BinarySearch(s.sums, maphash.String(s.seed, id))
	return ok
}

// unlisted returns, sorted, the reviews that the signed checkpoints or a
// witness know but the listing did not hold (listed): removed from the
// ledger entirely. Each witness is read on a connection of its own.
func (v *Verifier) unlisted(ctx context.Context, listed *idSet, signed map[string][]witnessMark) ([]string, error) {
	var (
		mu  sync.Mutex
		out = make(map[string]struct{})
	)
	add := func(id string) error {
		if !listed.has(id) {
			mu.Lock()
			out[id] = struct{}{}
			mu.Unlock()
		}
		return nil
	}
	for id := range signed {
		_ = add(id)
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, w := range v.witnesses() {
		g.Go(func() error {
			if l, ok := w.(ReviewLister); ok {
				if err := l.ReviewIDs(gctx, add); err != nil {
					return fmt.Errorf("read %s: %w", w.Name(), err)
				}
				return nil
			}
			ms, err := w.Marks(gctx, nil)
			if err != nil {
				return fmt.Errorf("read %s: %w", w.Name(), err)
			}
			for id := range ms {
				_ = add(id)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(out))
	for id := range out {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, nil
}
