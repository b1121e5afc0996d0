package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/memstore"
	"github.com/reviewledger/reviewledger/eventstore/pgstore"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
	"github.com/reviewledger/reviewledger/projections"
)

// writeReview stores a review that timed out twice and went to the manual
// queue (5 events).
func writeReview(t *testing.T, l *ledger.Ledger, id string, t0 time.Time) {
	t.Helper()
	ctx := context.Background()
	cp, _ := domain.DefaultPolicy().Class("caption_suggestion")
	sub, err := domain.Submit(domain.SubmitCommand{ReviewID: id, ContentClass: "caption_suggestion", ContentType: "text/plain",
		PayloadDigest: "sha256:00", Policy: cp, Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	rv, err := l.Create(ctx, sub, ledger.Actor{Name: "platform"})
	if err != nil {
		t.Fatal(err)
	}
	step := func(e domain.Event, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if rv, err = l.Append(ctx, rv, ledger.Actor{Name: "runner"}, e); err != nil {
			t.Fatal(err)
		}
	}
	step(rv.StartAttempt(t0.Add(time.Millisecond)))
	step(rv.TimeOutAttempt(domain.AttemptFailure{Attempt: 1, Classification: domain.ClassDeadlineExceeded}, t0.Add(10*time.Second)))
	step(rv.StartAttempt(t0.Add(11 * time.Second)))
	step(rv.TimeOutAttempt(domain.AttemptFailure{Attempt: 2, Classification: domain.ClassTransportError}, t0.Add(12*time.Second)))
}

func TestAuditVerifyAndReplay(t *testing.T) {
	ctx := context.Background()
	url := dbtest.URL(t)
	setEnv(t, map[string]string{"DATABASE_URL": url})
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	store := pgstore.New(pool, pgstore.Config{})
	defer store.Close()
	l := ledger.New(store)
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, id := range []string{"r1", "r2", "r3"} {
		writeReview(t, l, id, t0)
	}

	code, out, stderr := runCLI(t, ctx, "audit", "verify")
	if code != 0 || !strings.Contains(out, "audit verify: 3 reviews, 15 events checked: intact; 3 anchors advanced") {
		t.Fatalf("intact: exit %d\n%s\n%s", code, out, stderr)
	}

	code, out, stderr = runCLI(t, ctx, "replay", "r2", "--as-of", "2026-11-30T12:00:10.5Z")
	if code != 0 || !strings.Contains(out, "AttemptTimedOut") || strings.Contains(out, "transport_error") ||
		!strings.Contains(out, "hash_chain:    intact") || !strings.Contains(out, "2 later events not shown") {
		t.Fatalf("replay: exit %d\n%s\n%s", code, out, stderr)
	}
	if code, _, stderr := runCLI(t, ctx, "replay", "r2", "--as-of", "yesterday"); code != 2 || !strings.Contains(stderr, "--as-of") {
		t.Fatalf("bad --as-of: exit %d %s", code, stderr)
	}
	if code, _, stderr := runCLI(t, ctx, "replay", "nope"); code != 1 || !strings.Contains(stderr, "review not found") {
		t.Fatalf("unknown review: exit %d %s", code, stderr)
	}

	// Tamper with r2 in SQL and cut r3's tail.
	if _, err := pool.Exec(ctx, `UPDATE event SET data = convert_to(replace(convert_from(data, 'UTF8'), 'transport_error', 'rate_limited'), 'UTF8')
		WHERE stream = 'review-r2' AND revision = 4`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `DELETE FROM event WHERE stream = 'review-r3' AND revision = 4`); err != nil {
		t.Fatal(err)
	}
	code, out, stderr = runCLI(t, ctx, "audit", "verify")
	if code == 0 || !strings.Contains(out, "DAMAGED review r2: revision 4") || !strings.Contains(out, "DAMAGED review r3: revision 4") ||
		strings.Contains(out, "review r1:") || !strings.Contains(out, "2 DAMAGED") {
		t.Fatalf("tampered: exit %d\n%s\n%s", code, out, stderr)
	}
	if code, out, _ := runCLI(t, ctx, "audit", "verify", "--review", "r1"); code != 0 || !strings.Contains(out, "1 reviews, 5 events checked: intact") {
		t.Fatalf("--review r1: exit %d %s", code, out)
	}
	if code, out, _ := runCLI(t, ctx, "replay", "r2"); code != 0 || !strings.Contains(out, "BROKEN at revision 4") {
		t.Fatalf("replay of the tampered review: exit %d %s", code, out)
	}
}

func TestCapacity(t *testing.T) {
	setEnv(t, nil)
	code, out, stderr := runCLI(t, context.Background(), "capacity", "--rate", "20", "--service-time", "400ms", "--timeout-rate", "0.1", "--max-attempts", "3", "--attempt-timeout", "10s")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"1        20        1.36s  27.2", "2        2         1.36s  2.72", "total                     30.19", "20/s × 400ms = 8 workers"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	code, _, stderr = runCLI(t, context.Background(), "capacity", "--timeout-rate", "1.5")
	if code != 2 || !strings.Contains(stderr, "--timeout-rate") {
		t.Fatalf("bad input: exit %d %s", code, stderr)
	}
}

func TestCapacityFromDB(t *testing.T) {
	ctx := context.Background()
	pool := dbtest.Pool(t)
	store := memstore.New()
	l := ledger.New(store)
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	cp, _ := domain.DefaultPolicy().Class("caption_suggestion")
	// 20 reviews: 18 answer in 300 ms, 2 time out once then answer.
	for i := range 20 {
		at := t0.Add(time.Duration(i) * time.Second)
		sub, err := domain.Submit(domain.SubmitCommand{ReviewID: fmt.Sprintf("c%d", i), ContentClass: "caption_suggestion", ContentType: "text/plain", PayloadDigest: "sha256:00", Policy: cp, Now: at})
		if err != nil {
			t.Fatal(err)
		}
		rv, err := l.Create(ctx, sub, ledger.Actor{Name: "platform"})
		if err != nil {
			t.Fatal(err)
		}
		add := func(es ...domain.Event) {
			t.Helper()
			if rv, err = l.Append(ctx, rv, ledger.Actor{Name: "runner"}, es...); err != nil {
				t.Fatal(err)
			}
		}
		start, _ := rv.StartAttempt(at)
		add(start)
		if i < 2 {
			to, _ := rv.TimeOutAttempt(domain.AttemptFailure{Attempt: 1, Classification: domain.ClassDeadlineExceeded}, at.Add(10*time.Second))
			add(to)
			at = at.Add(10 * time.Second)
			start, _ := rv.StartAttempt(at)
			add(start)
		}
		found, err := rv.RecordFinding(domain.Finding{ReviewID: rv.ID(), Attempt: rv.Attempts(), State: domain.DecisionAccepted}, domain.SourceResponse, at.Add(300*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		add(found...)
	}
	r, err := projections.NewRunner(projections.Config{Pool: pool, Store: store, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := capacityFromDB(ctx, &out, projections.NewDB(pool), domain.DefaultPolicy(), time.Hour, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	// 22 attempts, 2 timeouts; p99 of findings ≈ 300 ms → 500 ms suggested.
	for _, want := range []string{"caption_suggestion", "22 ", "0.091", "10s → 500ms"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
