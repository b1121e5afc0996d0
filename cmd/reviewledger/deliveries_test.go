package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

func TestDeliveriesCommands(t *testing.T) {
	dbURL := dbtest.URL(t)
	setEnv(t, map[string]string{"DATABASE_URL": dbURL})
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	at := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	if _, err := conn.Exec(ctx, `INSERT INTO notify_delivery
		(id, review_id, revision, event_type, body, state, attempts, created_at, retry_since, next_attempt_at, last_attempt_at, last_status, last_error, delivered_at) VALUES
		('d1', 'r1', 2, 'review.decided', '{}', 'delivered', 1, $1, $1, $1, $1, 200, NULL, $1),
		('d2', 'r2', 3, 'review.manual_review', '{}', 'pending', 2, $1, $1, $1, $1, 503, 'HTTP 503: busy', NULL),
		('d3', 'r3', 2, 'review.decided', '{}', 'failed', 9, $1, $1, $1, $1, NULL, 'connection refused', NULL),
		('d4', 'r4', 2, 'review.decided', '{}', 'failed', 9, $1, $1, $1, $1, NULL, 'connection refused', NULL)`, at); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runCLI(t, ctx, "deliveries", "list")
	if code != 0 || strings.Count(out, "\n") != 4 || !strings.Contains(out, "HTTP 503: busy") || strings.Contains(out, "d1 ") {
		t.Fatalf("list: exit %d\n%s%s", code, out, stderr)
	}
	code, out, _ = runCLI(t, ctx, "deliveries", "list", "--state=all", "--json")
	if code != 0 || !strings.HasPrefix(out, `{"deliveries":[{"id":"d1"`) || strings.Count(out, `"id"`) != 4 {
		t.Fatalf("list --json: exit %d\n%s", code, out)
	}
	for args, want := range map[string]string{
		"--state=broken": "--state: must be one of",
		"--limit=0":      "--limit",
		"--review=a b":   "--review",
	} {
		if code, _, stderr := runCLI(t, ctx, "deliveries", "list", args); code != 2 || !strings.Contains(stderr, want) {
			t.Errorf("list %s: exit %d, stderr %q", args, code, stderr)
		}
	}
	if code, out, stderr := runCLI(t, ctx, "deliveries", "redeliver", "d3"); code != 0 || !strings.Contains(out, "d3 (review r3 version 2) due again") {
		t.Fatalf("redeliver d3: exit %d %s%s", code, out, stderr)
	}
	if code, _, stderr := runCLI(t, ctx, "deliveries", "redeliver", "nope"); code != 1 || !strings.Contains(stderr, "delivery not found") {
		t.Errorf("redeliver nope: exit %d %s", code, stderr)
	}
	if code, out, _ := runCLI(t, ctx, "deliveries", "redeliver", "--failed"); code != 0 || out != "1 given-up deliveries due again\n" {
		t.Errorf("redeliver --failed: exit %d %q", code, out)
	}
	if code, _, _ := runCLI(t, ctx, "deliveries", "redeliver"); code != 2 {
		t.Errorf("redeliver without IDs: exit %d", code)
	}
	var failed int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM notify_delivery WHERE state = 'failed'`).Scan(&failed); err != nil || failed != 0 {
		t.Errorf("%d still failed (%v)", failed, err)
	}
}
