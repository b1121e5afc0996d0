package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/eventstoretest"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/pgstore"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// TestLedgerPartitionsCommands lists the partitions of a ledger whose
// appends have moved past the first two partitions, detaches the first
// (keeping its policy snapshot) and refuses the second, which holds the
// first event of a stream that goes on; bad input is one line naming the
// flag.
func TestLedgerPartitionsCommands(t *testing.T) {
	ctx := context.Background()
	dbURL := dbtest.URL(t)
	setEnv(t, map[string]string{"DATABASE_URL": dbURL})
	pool, store := openStore(t, dbURL)
	event := func(typ string) eventstore.EventData {
		return eventstore.EventData{ID: eventstoretest.NewID(), Type: typ, Data: []byte(`{}`), Metadata: []byte(`{}`)}
	}
	appendAt := func(seq int64, stream string, expected eventstore.ExpectedRevision, evs ...eventstore.EventData) {
		t.Helper()
		if seq > 0 {
			if _, err := pool.Exec(ctx, `SELECT setval(pg_get_serial_sequence('event', 'seq'), $1, false)`, seq); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := store.Append(ctx, stream, expected, evs...); err != nil {
			t.Fatal(err)
		}
	}
	policy := event(ledger.TypePolicySnapshot)
	appendAt(0, ledger.PolicyStreamPrefix+"00", eventstore.NoStream, policy)
	appendAt(0, "review-done", eventstore.NoStream, event("Early"), event("Early"))
	appendAt(20000000, "review-open", eventstore.NoStream, event("Early"))
	appendAt(30000000, "review-open", eventstore.Exact(0), event("Later"))

	code, out, stderr := runCLI(t, ctx, "ledger", "partitions")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) < 4 || !strings.HasPrefix(lines[0], "PARTITION") ||
		!strings.HasPrefix(lines[1], "event_p0 ") || !strings.HasPrefix(lines[2], "event_p20000000 ") || !strings.HasPrefix(lines[3], "event_p30000000 ") {
		t.Fatalf("ledger partitions: exit %d\n%s%s", code, out, stderr)
	}
	if f := strings.Fields(lines[1]); f[1] != "-" || f[2] != "20000000" || f[3] != "3" || f[len(f)-1] != "attached" {
		t.Fatalf("event_p0's line %q: want no lower bound, 20000000, 3 events, attached", lines[1])
	}

	for args, want := range map[string]string{
		"--before=0":  "reviewledger: ledger detach: --before: must be a seq above 0, got 0\n",
		"--before=-5": "reviewledger: ledger detach: --before: must be a seq above 0, got -5\n",
		"--before=x":  "--before",
	} {
		if code, out, stderr := runCLI(t, ctx, "ledger", "detach", args); code != 2 || out != "" || !strings.Contains(stderr, want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("ledger detach %s: exit %d, stderr %q; want 2 and %q", args, code, stderr, want)
		}
	}
	if code, _, stderr := runCLI(t, ctx, "ledger", "detach"); code != 2 || !strings.Contains(stderr, "--before") {
		t.Errorf("ledger detach without --before: exit %d, stderr %q", code, stderr)
	}

	code, out, stderr = runCLI(t, ctx, "ledger", "detach", "--before", "30000000")
	if want := "detached event_p0: archive it (pg_dump -t event_p0), then DROP TABLE event_p0\n"; code != 1 || out != want ||
		stderr != "reviewledger ledger detach: refused: event_p20000000: review-open: streams go on in a later partition (their first events would leave the ledger; detach below their start)\n" {
		t.Fatalf("ledger detach: exit %d, %q %q; want 1, %q and the refusal of event_p20000000", code, out, stderr, want)
	}
	if code, out, _ := runCLI(t, ctx, "ledger", "detach", "--before", "20000000"); code != 0 || !strings.HasPrefix(out, "nothing to detach") {
		t.Fatalf("ledger detach again: exit %d, %q", code, out)
	}
	if _, out, _ := runCLI(t, ctx, "ledger", "partitions"); strings.Contains(out, "event_p0 ") || !strings.Contains(out, "event_p20000000 ") {
		t.Fatalf("after the detach:\n%s", out)
	}
	var archived int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM event_p0`).Scan(&archived); err != nil || archived != 3 {
		t.Fatalf("the detached table holds %d events (%v), want 3", archived, err)
	}

	// The policy snapshot stays, as it was; review-done's events left, and
	// its expected revisions hold.
	got, err := store.ReadStream(ctx, ledger.PolicyStreamPrefix+"00", 0)
	if err != nil || len(got) != 1 || got[0].ID != policy.ID || got[0].Revision != 0 {
		t.Fatalf("the policy snapshot after the detach: %+v %v", got, err)
	}
	if _, err := store.ReadStream(ctx, "review-done", 0); !errors.Is(err, eventstore.ErrStreamNotFound) {
		t.Fatalf("review-done after the detach: %v, want no events", err)
	}
	for _, expected := range []eventstore.ExpectedRevision{eventstore.NoStream, eventstore.Exact(0)} {
		_, err = store.Append(ctx, "review-done", expected, event("Stale"))
		var wev *eventstore.WrongExpectedVersionError
		if !errors.As(err, &wev) || !wev.Exists || wev.Actual != 1 {
			t.Fatalf("review-done at %v after the detach: %v, want the stream at revision 1", expected, err)
		}
	}
}

// openStore opens a pool on dbURL and the pgstore on it, both closed when
// the test ends.
func openStore(t *testing.T, dbURL string) (*pgxpool.Pool, *pgstore.Store) {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	store := pgstore.New(pool, pgstore.Config{})
	t.Cleanup(func() { store.Close(); pool.Close() })
	return pool, store
}
