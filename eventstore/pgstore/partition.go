package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/eventstore/storeerr"
)

// PartitionsAhead is how many partitions' widths of seq above the next
// value an append that finds no partition has covered.
const PartitionsAhead = 2

// ahead is how many widths the attempt-th retry of an append that found no
// partition has covered: twice as many at each retry, so that an append
// whose headroom concurrent appends used up again and again (partitions
// only a few seqs wide) gets through.
func ahead(attempt int) int { return PartitionsAhead << min(attempt-1, 10) }

// noPartition reports whether err is the server refusing a row of event
// because no partition holds its seq (a check violation).
func noPartition(err error) bool {
	return storeerr.Code(err) == storeerr.CodeCheckViolation &&
		strings.HasPrefix(storeerr.Message(err), `no partition of relation "event"`)
}

// EnsurePartitions creates the partitions of event that cover the next
// ahead widths of seq (migration 0004, event_partitions_ensure) and returns
// how many it created.
func (s *Store) EnsurePartitions(ctx context.Context, ahead int) (int, error) {
	return EnsurePartitions(ctx, s.pool, ahead)
}

// EnsurePartitions is Store.EnsurePartitions on pool.
func EnsurePartitions(ctx context.Context, pool *pgxpool.Pool, ahead int) (int, error) {
	var made int
	if err := pool.QueryRow(ctx, `SELECT event_partitions_ensure($1)`, ahead).Scan(&made); err != nil {
		return 0, storeerr.Wrap(ctx, "create the ledger's partitions", err)
	}
	return made, nil
}

// Partition describes one partition of the ledger.
type Partition struct {
	Name string
	// Lower and Upper bound its seq: Lower <= seq < Upper. First is true
	// for the first partition, which has no lower bound (Lower is 0).
	Lower, Upper int64
	First        bool
	// Detaching is true while a DETACH … CONCURRENTLY of it is unfinished.
	Detaching bool
	// Rows is its number of events, Bytes its size with its indexes.
	Rows, Bytes int64
	// Oldest and Newest are the RecordedAt of its first and last events in
	// the global order; zero when it has none.
	Oldest, Newest time.Time
}

// Partitions lists the partitions of the ledger in seq order. It counts
// each one's rows, so it reads every partition's index once.
func Partitions(ctx context.Context, pool *pgxpool.Pool) ([]Partition, error) {
	rows, _ := pool.Query(ctx, `SELECT name, coalesce(lower, 0), lower IS NULL, upper, detaching
		FROM event_partition ORDER BY upper`)
	parts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Partition, error) {
		var p Partition
		err := row.Scan(&p.Name, &p.Lower, &p.First, &p.Upper, &p.Detaching)
		return p, err
	})
	if err != nil {
		return nil, storeerr.Wrap(ctx, "list the ledger's partitions", err)
	}
	for i := range parts {
		p := &parts[i]
		t := pgx.Identifier{p.Name}.Sanitize()
		var oldest, newest *time.Time
		err := pool.QueryRow(ctx, `SELECT count(*), pg_total_relation_size($1::regclass),
			(SELECT recorded_at FROM `+t+` ORDER BY xid, seq LIMIT 1),
			(SELECT recorded_at FROM `+t+` ORDER BY xid DESC, seq DESC LIMIT 1)
			FROM `+t, t).Scan(&p.Rows, &p.Bytes, &oldest, &newest)
		if err != nil {
			return nil, storeerr.Wrap(ctx, "measure partition "+p.Name, err)
		}
		if oldest != nil {
			p.Oldest, p.Newest = *oldest, *newest
		}
	}
	return parts, nil
}

// ErrNothingToDetach is returned by Detach when no partition lies wholly
// below its bound and below the next seq.
var ErrNothingToDetach = errors.New("no partition to detach")

// ErrStreamsContinue is returned by Detach, unless Cut is set, when a
// partition holds events of streams that go on in a later partition:
// detaching it would leave those streams without their first events.
var ErrStreamsContinue = errors.New("streams go on in a later partition")

// DetachOptions tunes Detach. The zero value detaches only partitions
// whose streams all end in them, and keeps nothing.
type DetachOptions struct {
	// Keep lists stream name prefixes whose events are copied, as they are
	// (stream, revision, ID, type, data, metadata, time), into the live
	// partition before a partition is detached, so that they stay in the
	// ledger: streams that later appends or reads still need whole, such
	// as the policy snapshots (ledger.PolicyStreamPrefix). The copies take
	// new positions: they appear once more in the global order.
	Keep []string
	// Cut allows detaching partitions that hold the first events of
	// streams that go on later, which then read from their first event
	// still attached.
	Cut bool
	// Done, when not nil, is called with each partition's name once it is
	// detached.
	Done func(name string)
}

// Detach detaches from the ledger every partition whose seq range lies
// wholly below before and below the sequence's next value (so no append
// can still land in it), oldest first, each with ALTER TABLE … DETACH
// PARTITION … CONCURRENTLY: appends and reads go on meanwhile, and each
// detach waits for the transactions that may still read the partition.
// Before each, it checks that none of the partition's streams goes on
// later (ErrStreamsContinue, naming a few, unless opts.Cut) and copies the
// events of the streams opts.Keep names forward. A detach left unfinished
// (interrupted) is finished (FINALIZE). Heads stay: a stream whose events
// all left goes on at its revision. The detached tables stay in the
// database, for the operator to dump and drop; Detach returns their
// names.
func Detach(ctx context.Context, pool *pgxpool.Pool, before int64, opts DetachOptions) ([]string, error) {
	rows, _ := pool.Query(ctx, `SELECT p.name, p.detaching FROM event_partition p, event_next_seq() AS next
		WHERE p.upper <= $1 AND p.upper <= next
			AND p.upper < (SELECT max(upper) FROM event_partition)
		ORDER BY p.upper`, before)
	type target struct {
		name      string
		detaching bool
	}
	targets, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (target, error) {
		var t target
		err := row.Scan(&t.name, &t.detaching)
		return t, err
	})
	if err != nil {
		return nil, storeerr.Wrap(ctx, "choose the partitions to detach", err)
	}
	if len(targets) == 0 {
		return nil, fmt.Errorf("below seq %d: %w", before, ErrNothingToDetach)
	}
	var detached []string
	for _, t := range targets {
		if err := detachOne(ctx, pool, t.name, t.detaching, opts); err != nil {
			return detached, err
		}
		detached = append(detached, t.name)
		if opts.Done != nil {
			opts.Done(t.name)
		}
	}
	return detached, nil
}

// detachOne checks, keeps and detaches one partition.
func detachOne(ctx context.Context, pool *pgxpool.Pool, name string, pending bool, opts DetachOptions) error {
	table := pgx.Identifier{name}.Sanitize()
	if pending {
		// Finishing an interrupted detach: the checks and copies ran.
		_, err := pool.Exec(ctx, `ALTER TABLE event DETACH PARTITION `+table+` FINALIZE`)
		return storeerr.Wrap(ctx, "finish detaching "+name, err)
	}
	if !opts.Cut {
		rows, _ := pool.Query(ctx, `SELECT p.stream FROM (SELECT stream, max(revision) AS last FROM `+table+` GROUP BY stream) AS p
			JOIN event_stream h ON h.stream = p.stream WHERE h.revision > p.last ORDER BY p.stream LIMIT 4`)
		going, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return storeerr.Wrap(ctx, "check the streams of "+name, err)
		}
		if len(going) > 0 {
			more := ""
			if len(going) > 3 {
				going, more = going[:3], ", …"
			}
			return fmt.Errorf("%s: %s%s: %w", name, strings.Join(going, ", "), more, ErrStreamsContinue)
		}
	}
	if len(opts.Keep) > 0 {
		keep := `INSERT INTO event (stream, revision, id, type, data, metadata, recorded_at)
			SELECT stream, revision, id, type, data, metadata, recorded_at FROM ` + table + `
			WHERE EXISTS (SELECT 1 FROM unnest($1::text[]) AS k(prefix) WHERE starts_with(stream, k.prefix))
			ORDER BY seq`
		_, err := pool.Exec(ctx, keep, opts.Keep)
		for attempt := 1; noPartition(err) && attempt < maxAttempts; attempt++ {
			if _, err = EnsurePartitions(ctx, pool, ahead(attempt)); err == nil {
				_, err = pool.Exec(ctx, keep, opts.Keep)
			}
		}
		if err != nil {
			return storeerr.Wrap(ctx, "keep the streams of "+name, err)
		}
	}
	// One statement outside a transaction block, as CONCURRENTLY requires:
	// pgx sends a statement without arguments as a simple query.
	_, err := pool.Exec(ctx, `ALTER TABLE event DETACH PARTITION `+table+` CONCURRENTLY`)
	return storeerr.Wrap(ctx, "detach "+name, err)
}
