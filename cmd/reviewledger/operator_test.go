package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/esdbstore"
	"github.com/reviewledger/reviewledger/eventstore/esdbstore/esdbfake"
	"github.com/reviewledger/reviewledger/eventstore/eventstoretest"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/pgstore"
	"github.com/reviewledger/reviewledger/migrations"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
	"github.com/reviewledger/reviewledger/projections"
)

// backend is a ledger backend the tests can run: the settings selecting
// it and a store on it.
type backend struct {
	name string
	open func(t *testing.T, databaseURL string) (env map[string]string, store eventstore.Store)
}

var backends = []backend{
	{"postgres", func(t *testing.T, databaseURL string) (map[string]string, eventstore.Store) {
		pool, err := pgxpool.New(context.Background(), databaseURL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		s := pgstore.New(pool, pgstore.Config{})
		t.Cleanup(s.Close)
		return map[string]string{}, s
	}},
	{"kurrentdb", func(t *testing.T, _ string) (map[string]string, eventstore.Store) {
		url := (&esdbfake.Server{}).Start(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s, err := esdbstore.Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return map[string]string{"REVIEWLEDGER_EVENTSTORE": "kurrentdb", "REVIEWLEDGER_EVENTSTORE_URL": url}, s
	}},
}

// TestOperatorCommandsOnEachBackend runs every operator command on each
// ledger backend: each must read the ledger REVIEWLEDGER_EVENTSTORE names,
// whose reviews exist nowhere else.
func TestOperatorCommandsOnEachBackend(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			dbURL := dbtest.URL(t)
			env, store := b.open(t, dbURL)
			env["DATABASE_URL"] = dbURL
			l := ledger.New(store)
			t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
			for _, id := range []string{"r1", "r2", "r3"} {
				writeReview(t, l, id, t0)
			}
			eventstoretest.WaitReadable(t, store, 15+1) // 3 reviews of 5 events, and the policy snapshot they name
			setEnv(t, env)

			code, out, stderr := runCLI(t, ctx, "audit", "verify")
			if code != 0 || !strings.Contains(out, "audit verify: 3 reviews, 15 events checked: intact; 3 anchors advanced") {
				t.Fatalf("audit verify: exit %d\n%s\n%s", code, out, stderr)
			}
			code, out, stderr = runCLI(t, ctx, "replay", "r2")
			if code != 0 || !strings.Contains(out, "transport_error") || !strings.Contains(out, "hash_chain:    intact") {
				t.Fatalf("replay: exit %d\n%s\n%s", code, out, stderr)
			}
			code, out, stderr = runCLI(t, ctx, "projections", "rebuild")
			if code != 0 || strings.Count(out, "from 16 events") != len(projections.Names()) {
				t.Fatalf("projections rebuild: exit %d\n%s\n%s", code, out, stderr)
			}
			code, out, stderr = runCLI(t, ctx, "projections", "status")
			table, elections, _ := strings.Cut(strings.TrimSpace(out), "\n\n")
			lines := strings.Split(table, "\n")
			if code != 0 || len(lines) != 1+len(projections.Names()) || elections != "sweeper active: none\nnotifier active: none" {
				t.Fatalf("projections status: exit %d\n%s\n%s", code, out, stderr)
			}
			for _, line := range lines[1:] {
				// 15 review events and the policy snapshot, which the
				// projections read and skip.
				if f := strings.Fields(line); len(f) < 6 || f[3] != "16" || f[4] != "0" {
					t.Fatalf("projections status: line %q, want 16 events and no lag", line)
				}
			}
			// The rebuilt review_summary witnesses the same ledger.
			code, out, stderr = runCLI(t, ctx, "audit", "verify", "--review", "r3")
			if code != 0 || !strings.Contains(out, "1 reviews, 5 events checked: intact") {
				t.Fatalf("audit verify --review r3: exit %d\n%s\n%s", code, out, stderr)
			}
			if b.name != "postgres" {
				var n int
				if err := pgxQueryInt(t, dbURL, `SELECT count(*) FROM event`, &n); err != nil || n != 0 {
					t.Fatalf("PostgreSQL's event table holds %d events (%v): the commands wrote to the wrong ledger", n, err)
				}
			}
		})
	}
}

func pgxQueryInt(t *testing.T, databaseURL, sql string, n *int) error {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.QueryRow(ctx, sql).Scan(n)
}

// TestReadOnlyCommandsNeverMigrate: on a database never migrated, or one
// migration behind, the operator commands refuse with one line naming the
// database and how far it is migrated, and leave the schema as it was.
func TestReadOnlyCommandsNeverMigrate(t *testing.T) {
	ctx := context.Background()
	dbURL := dbtest.URL(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	database := strings.TrimPrefix(u.Path, "/")
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE SCHEMA fresh`); err != nil {
		t.Fatal(err)
	}
	setEnv(t, map[string]string{"DATABASE_URL": dbURL + "&search_path=fresh"})
	all, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	commands := [][]string{
		{"audit", "verify"},
		{"replay", "r1"},
		{"projections", "status"},
		{"projections", "rebuild"},
		{"capacity", "--from-db"},
		{"deliveries", "list"},
		{"ledger", "partitions"},
		{"ledger", "detach", "--before", "1"},
	}
	refuse := func(applied int) {
		t.Helper()
		for _, args := range commands {
			code, out, stderr := runCLI(t, ctx, args...)
			name := args[0]
			if args[0] != "replay" && args[0] != "capacity" {
				name += " " + args[1]
			}
			want := fmt.Sprintf(`reviewledger %s: database %s is not migrated (version %d of %d): run "reviewledger migrate"`+"\n",
				name, database, applied, len(all))
			if code != 1 || stderr != want || out != "" {
				t.Errorf("%v: exit %d, stderr %q, stdout %q; want 1 and %q", args, code, stderr, out, want)
			}
		}
	}
	refuse(0)
	var tables int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'fresh'`).Scan(&tables); err != nil || tables != 0 {
		t.Fatalf("the refused commands created %d tables (%v)", tables, err)
	}

	if code, out, stderr := runCLI(t, ctx, "migrate"); code != 0 {
		t.Fatalf("migrate: exit %d\n%s\n%s", code, out, stderr)
	}
	last := all[len(all)-1]
	if _, err := conn.Exec(ctx, `DELETE FROM fresh.reviewledger_migration WHERE version = $1`, last.Version); err != nil {
		t.Fatal(err)
	}
	refuse(len(all) - 1)
}

// TestCommandErrorsAreOneLine: whatever fails, a command ends with one
// plain line on stderr naming what failed, and a non-zero exit.
func TestCommandErrorsAreOneLine(t *testing.T) {
	ctx := context.Background()
	dbURL := dbtest.URL(t)
	u, _ := url.Parse(dbURL)
	u.Path = "/reviewledger_absent_" + fmt.Sprint(time.Now().UnixNano())
	missingDB := u.String()
	unreachable := "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=1"

	// A damaged ledger for audit verify.
	pool, store := openStore(t, dbURL)
	writeReview(t, ledger.New(store), "r1", time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	if _, err := pool.Exec(ctx, `UPDATE event SET data = convert_to(replace(convert_from(data, 'UTF8'), 'transport_error', 'rate_limited'), 'UTF8')
		WHERE stream = 'review-r1' AND revision = 4`); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name string
		env  map[string]string
		args []string
		code int
		want []string
	}{
		{"unknown review", nil, []string{"replay", "nope"}, 1, []string{`reviewledger replay: `, `"nope"`, "review not found"}},
		{"invalid review ID", nil, []string{"replay", "a/b"}, 2, []string{"reviewledger: ", "review ID"}},
		{"unknown review to verify", nil, []string{"audit", "verify", "--review", "nope"}, 1, []string{"reviewledger audit verify: ", `"nope"`}},
		{"damaged ledger", nil, []string{"audit", "verify"}, 1, []string{"reviewledger audit verify: 1 of 1 reviews damaged"}},
		{"unknown projection", nil, []string{"projections", "rebuild", "nope"}, 2, []string{`"nope"`}},
		{"database missing", map[string]string{"DATABASE_URL": missingDB}, []string{"migrate"}, 1,
			[]string{"reviewledger migrate: DATABASE_URL: database ", strings.TrimPrefix(u.Path, "/"), "does not exist", "createdb"}},
		{"database missing for serve", map[string]string{"DATABASE_URL": missingDB, "REVIEWLEDGER_ADDR": "127.0.0.1:0"}, []string{"serve"}, 1,
			[]string{"reviewledger serve: DATABASE_URL: database ", "does not exist"}},
		{"database unreachable", map[string]string{"DATABASE_URL": unreachable}, []string{"audit", "verify"}, 1,
			[]string{"reviewledger audit verify: DATABASE_URL: cannot reach the database"}},
		{"setting", map[string]string{"REVIEWLEDGER_SWEEP_INTERVAL": "often"}, []string{"serve"}, 2, []string{"REVIEWLEDGER_SWEEP_INTERVAL"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"DATABASE_URL": dbURL}
			for k, v := range tc.env {
				env[k] = v
			}
			setEnv(t, env)
			code, _, stderr := runCLI(t, ctx, tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d; stderr %q", code, tc.code, stderr)
			}
			if strings.Count(stderr, "\n") != 1 || !strings.HasSuffix(stderr, "\n") || !strings.HasPrefix(stderr, "reviewledger") {
				t.Errorf("stderr is not one line starting with reviewledger: %q", stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q does not contain %q", stderr, w)
				}
			}
		})
	}
}
