package main

import (
	"cmp"
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// statements is the time PostgreSQL spent on each statement of a round,
// read from pg_stat_statements: where an end-to-end round's time goes in
// the database, at the empty ledger and at N.
type statements map[string]statementTime

type statementTime struct {
	calls int64
	ms    float64 // total execution time
}

// statementStats reads pg_stat_statements on the run's server when the
// server loads it (shared_preload_libraries): a server that does not is
// measured without the profile, which the run says once.
type statementStats struct {
	admin *pgx.Conn
}

// openStatementStats returns the stats of the server of adminURL, or nil
// and the reason when it has none.
func openStatementStats(ctx context.Context, adminURL string) (*statementStats, string) {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return nil, err.Error()
	}
	if _, err := conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		conn.Close(ctx)
		return nil, "pg_stat_statements is not installed: " + err.Error()
	}
	if _, err := conn.Exec(ctx, `SELECT 1 FROM pg_stat_statements LIMIT 1`); err != nil {
		conn.Close(ctx)
		return nil, "pg_stat_statements is not loaded (shared_preload_libraries)"
	}
	return &statementStats{admin: conn}, ""
}

func (s *statementStats) close(ctx context.Context) { s.admin.Close(ctx) }

// reset forgets what the database of dbURL ran so far.
func (s *statementStats) reset(ctx context.Context, dbURL string) error {
	_, err := s.admin.Exec(ctx, `SELECT pg_stat_statements_reset(0, (SELECT oid FROM pg_database WHERE datname = $1), 0)`, dbName(dbURL))
	return err
}

// read returns what the database of dbURL ran since its reset.
func (s *statementStats) read(ctx context.Context, dbURL string) (statements, error) {
	rows, err := s.admin.Query(ctx, `SELECT query, calls, total_exec_time FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1)`, dbName(dbURL))
	if err != nil {
		return nil, err
	}
	out := statements{}
	var (
		q string
		t statementTime
	)
	_, err = pgx.ForEachRow(rows, []any{&q, &t.calls, &t.ms}, func() error {
		q = strings.Join(strings.Fields(q), " ")
		o := out[q]
		out[q] = statementTime{calls: o.calls + t.calls, ms: o.ms + t.ms}
		return nil
	})
	return out, err
}

func dbName(dbURL string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		return ""
	}
	return strings.TrimPrefix(u.Path, "/")
}

// add adds b into a.
func (a statements) add(b statements) {
	for q, t := range b {
		o := a[q]
		a[q] = statementTime{calls: o.calls + t.calls, ms: o.ms + t.ms}
	}
}

// statementRow is one statement's time per review, at the empty ledger and
// at N.
type statementRow struct {
	query       string
	empty, full float64 // ms per review
}

// topStatements returns the n statements whose time per review grew most
// from empty (over emptyReviews reviews) to full (over fullReviews), and
// the whole database time per review of each.
func topStatements(empty, full statements, emptyReviews, fullReviews, n int) (rows []statementRow, emptyTotal, fullTotal float64) {
	per := func(t statementTime, reviews int) float64 { return t.ms / float64(max(reviews, 1)) }
	seen := map[string]bool{}
	for q := range empty {
		seen[q] = true
	}
	for q := range full {
		seen[q] = true
	}
	for q := range seen {
		r := statementRow{query: q, empty: per(empty[q], emptyReviews), full: per(full[q], fullReviews)}
		emptyTotal, fullTotal = emptyTotal+r.empty, fullTotal+r.full
		rows = append(rows, r)
	}
	slices.SortFunc(rows, func(a, b statementRow) int {
		return cmp.Or(cmp.Compare(b.full-b.empty, a.full-a.empty), strings.Compare(a.query, b.query))
	})
	return rows[:min(n, len(rows))], emptyTotal, fullTotal
}

// printStatements prints the statement profile of the pairs.
func (r *scaleRun) printStatements(empty, full statements, emptyReviews, fullReviews int) {
	rows, et, ft := topStatements(empty, full, emptyReviews, fullReviews, 8)
	r.line("  database time a review, empty → at N", fmt.Sprintf("%.3f ms → %.3f ms (pg_stat_statements)", et, ft), "", "")
	for _, s := range rows {
		q := s.query
		if len(q) > 100 {
			q = q[:100] + "…"
		}
		fmt.Fprintf(r.out, "    %.3f ms → %.3f ms  %s\n", s.empty, s.full, q)
	}
}
