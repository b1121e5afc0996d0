package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/eventstoretest"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/pgstore"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
	"github.com/reviewledger/reviewledger/projections"
)

func TestProjectionsRebuildAndStatus(t *testing.T) {
	url := dbtest.URL(t)
	setEnv(t, map[string]string{"DATABASE_URL": url})
	ctx := context.Background()

	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	store := pgstore.New(pool, pgstore.Config{})
	l := ledger.New(store)
	policy := domain.DefaultPolicy()
	for _, id := range []string{"one", "two", "three"} {
		sub, err := domain.Submit(domain.SubmitCommand{ReviewID: id, ContentClass: "caption_suggestion", PayloadDigest: "sha256:00",
			Policy: policy.Classes["caption_suggestion"], Now: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Create(ctx, sub, ledger.Actor{Name: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	// The three Submitted and the policy snapshot they name, stored once.
	const events = 4
	eventstoretest.WaitReadable(t, store, events)
	store.Close()

	code, out, stderr := runCLI(t, ctx, "projections", "status")
	if code != 0 || !strings.Contains(out, "review_summary") || !strings.Contains(out, "never") {
		t.Fatalf("status before: exit %d\n%s\n%s", code, out, stderr)
	}
	code, out, stderr = runCLI(t, ctx, "projections", "rebuild", "review_summary")
	if code != 0 || !strings.Contains(out, "rebuilt review_summary (version 1) from 4 events") {
		t.Fatalf("rebuild: exit %d\n%s\n%s", code, out, stderr)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM review_summary`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("review_summary: %d rows, %v", n, err)
	}
	code, out, stderr = runCLI(t, ctx, "projections", "rebuild")
	if code != 0 || strings.Count(out, "rebuilt ") != len(projections.Names()) {
		t.Fatalf("rebuild all: exit %d\n%s\n%s", code, out, stderr)
	}
	code, out, _ = runCLI(t, ctx, "projections", "status")
	table, elections, _ := strings.Cut(strings.TrimSpace(out), "\n\n")
	if !strings.Contains(table, "ACTIVE") || strings.TrimSpace(elections) != "sweeper active: none\nnotifier active: none" {
		t.Fatalf("status after: no ACTIVE column, or a sweeper while no server runs:\n%s", out)
	}
	for _, line := range strings.Split(table, "\n")[1:] {
		if f := strings.Fields(line); code != 0 || len(f) < 6 || f[3] != strconv.Itoa(events) || f[4] != "0" {
			t.Fatalf("status after: exit %d, line %q", code, line)
		}
	}

	code, _, stderr = runCLI(t, ctx, "projections", "rebuild", "nope")
	if code != 2 || !strings.Contains(stderr, `"nope"`) {
		t.Fatalf("unknown projection: exit %d, %s", code, stderr)
	}
}
