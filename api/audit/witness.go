package audit

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/eventstore/storeerr"
)

// ReplicaAnchors reads audit anchors from a streaming replica and
// advances them on its primary: the anchors read are then as recent as
// the streams read from the same replica (a lagging replica never shows
// an anchor ahead of its stream), and nothing is written to a read-only
// server. Advance never moves an anchor backwards, so anchoring what a
// lagging replica saw is safe.
type ReplicaAnchors struct {
	Replica, Primary PGAnchors
}

var (
	_ Anchors      = ReplicaAnchors{}
	_ ReviewLister = ReplicaAnchors{}
)

// Name implements Witness.
func (ReplicaAnchors) Name() string { return PGAnchors{}.Name() }

// Marks implements Witness, on the replica.
func (a ReplicaAnchors) Marks(ctx context.Context, ids []string) (map[string]Mark, error) {
	return a.Replica.Marks(ctx, ids)
}

// ReviewIDs implements ReviewLister, on the replica.
func (a ReplicaAnchors) ReviewIDs(ctx context.Context, each func(id string) error) error {
	return a.Replica.ReviewIDs(ctx, each)
}

// Advance implements Anchors, on the primary.
func (a ReplicaAnchors) Advance(ctx context.Context, marks map[string]Mark, at time.Time) error {
	return a.Primary.Advance(ctx, marks, at)
}

// PGSummaries is the review_summary read model as a witness: the version
// each review had reached when the projection last saw it. A projection
// rebuilt after the damage sees the damaged ledger, so it witnesses only
// what happened since its last rebuild.
type PGSummaries struct {
	Pool *pgxpool.Pool
}

var (
	_ Witness      = PGSummaries{}
	_ ReviewLister = PGSummaries{}
)

// Name implements Witness.
func (PGSummaries) Name() string { return "review_summary" }

// Marks implements Witness.
func (s PGSummaries) Marks(ctx context.Context, ids []string) (map[string]Mark, error) {
	return readMarks(ctx, s.Pool, summaryMarks, ids)
}

// ReviewIDs implements ReviewLister.
func (s PGSummaries) ReviewIDs(ctx context.Context, each func(id string) error) error {
	rows, _ := s.Pool.Query(ctx, `SELECT review_id FROM review_summary`)
	return eachReviewID(ctx, rows, each)
}

// eachReviewID calls each with the review ID of every row of rows, one
// row at a time.
func eachReviewID(ctx context.Context, rows pgx.Rows, each func(id string) error) error {
	var id string
	if _, err := pgx.ForEachRow(rows, []any{&id}, func() error { return each(id) }); err != nil {
		return storeerr.Wrap(ctx, "read review IDs", err)
	}
	return nil
}

// markQueries are the statements a witness's table is read with, each
// giving the review ID, the revision and the hash of its rows.
type markQueries struct {
	all string // every review's
	// lookup reads the reviews of $1, each looked up in the table's key.
	lookup string
	// span reads every review from the least of $1 to the greatest, in
	// the table's order (what the database's collation says): one range
	// of its key, in which every review of $1 is.
	span string
}

var (
	summaryMarks = marksOf("review_summary", "version, ''")
)

// marksOf returns the statements that read table's marks: its review_id,
// then cols (the revision and the hash).
func marksOf(table, cols string) markQueries {
	sel := `SELECT review_id, ` + cols + ` FROM `
	return markQueries{
		all:    sel + table,
		lookup: sel + `unnest($1::text[]) AS m(id) JOIN ` + table + ` ON review_id = m.id`,
		span: sel + table + ` WHERE review_id BETWEEN (SELECT min(id) FROM unnest($1::text[]) id)
			AND (SELECT max(id) FROM unnest($1::text[]) id)`,
	}
}

// spanFrom is how many reviews are read as a span of the table's key
// rather than each looked up.
const spanFrom = 1024

// readMarks reads the marks of the reviews of ids (every review's when ids
// is nil) with q.
//
// A verification asks for a chunk of reviews at a time, in the order the
// ledger lists its streams, which is the witness's order too: a span of
// the key holds the chunk's reviews and few others (those the ledger no
// longer lists), and reads in some 10 ms what looking up 65,536 reviews
// one by one takes some 75 ms of the database's time for. Fewer reviews
// (one, or those the ledger no longer lists, which can be far apart) are
// each looked up. Neither is review_id = ANY($1): pgx prepares every
// statement, and PostgreSQL keeps a plan for any argument after five runs
// on a connection, in which = ANY compares each row it scans with every
// ID of the array.
func readMarks(ctx context.Context, pool *pgxpool.Pool, q markQueries, ids []string) (map[string]Mark, error) {
	switch {
	case ids == nil:
		rows, _ := pool.Query(ctx, q.all)
		return collectMarks(ctx, rows, nil)
	case len(ids) < spanFrom:
		rows, _ := pool.Query(ctx, q.lookup, ids)
		return collectMarks(ctx, rows, nil)
	}
	asked := askedSet(ids)
	rows, _ := pool.Query(ctx, q.span, ids)
	return collectMarks(ctx, rows, asked)
}

// askedSet returns the reviews asked for, ids, as a set.
func askedSet(ids []string) map[string]struct{} {
	set := make(map[string]struct{}, len(ids))
	for _, id := range ids {
		set[id] = struct{}{}
	}
	return set
}

// collectMarks collects the marks of rows, only those of the reviews
// asked for when asked is not nil.
func collectMarks(ctx context.Context, rows pgx.Rows, asked map[string]struct{}) (map[string]Mark, error) {
	out := make(map[string]Mark, len(asked))
	var (
		id   string
		rev  int64
		hash string
	)
	_, err := pgx.ForEachRow(rows, []any{&id, &rev, &hash}, func() error {
		if _, ok := asked[id]; ok || asked == nil {
			out[id] = Mark{Revision: uint64(rev), Hash: hash}
		}
		return nil
	})
	if err != nil {
		return nil, storeerr.Wrap(ctx, "read marks", err)
	}
	return out, nil
}
