package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
)

// A private server survives a restart and a SIGKILL with what was
// committed, and answers again after each.
func TestRestartAndKill(t *testing.T) {
	t.Parallel()
	c := Start(t)
	url := c.CreateDatabase("cluster_test")
	exec := func(sql string) int {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM kept`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := exec(`CREATE TABLE kept (n int); INSERT INTO kept VALUES (1)`); n != 1 {
		t.Fatalf("%d rows", n)
	}
	c.Restart()
	if n := exec(`INSERT INTO kept VALUES (2)`); n != 2 {
		t.Fatalf("after the restart: %d rows", n)
	}
	c.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	if conn, err := pgx.Connect(ctx, url); err == nil {
		conn.Close(ctx)
		t.Fatal("the killed server still answers")
	}
	cancel()
	c.StartAgain()
	if n := exec(`INSERT INTO kept VALUES (3)`); n != 3 {
		t.Fatalf("after the kill: %d rows", n)
	}
}

// A replica replays what the primary commits, refuses writes, and stops
// and starts again.
func TestReplica(t *testing.T) {
	t.Parallel()
	c := Start(t)
	url := c.CreateDatabase("replica_test")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	primary, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer primary.Close(ctx)
	if _, err := primary.Exec(ctx, `CREATE TABLE kept (n int); INSERT INTO kept VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	r := c.Replica()
	replica, err := pgx.Connect(ctx, r.URL("replica_test"))
	if err != nil {
		t.Fatal(err)
	}
	defer replica.Close(ctx)
	var standby bool
	if err := replica.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&standby); err != nil || !standby {
		t.Fatalf("replica in recovery: %v, %v", standby, err)
	}
	if _, err := primary.Exec(ctx, `INSERT INTO kept VALUES (2)`); err != nil {
		t.Fatal(err)
	}
	clocktest.EventuallyShows(t, "the replica to hold the second row", func() (bool, string) {
		var n int
		if err := replica.QueryRow(ctx, `SELECT count(*) FROM kept`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 2, fmt.Sprintf("%d rows", n)
	})
	if _, err := replica.Exec(ctx, `INSERT INTO kept VALUES (3)`); err == nil {
		t.Fatal("the replica took a write")
	}
	r.Stop()
	r.StartAgain()
}

// A server restored from a base backup holds what was committed before
// the backup and nothing after, takes writes, and leaves the original and
// the backup as they were.
func TestBaseBackupAndRestore(t *testing.T) {
	t.Parallel()
	c := Start(t)
	url := c.CreateDatabase("backup_test")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	count := func(url, sql string) int {
		t.Helper()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM kept`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	count(url, `CREATE TABLE kept (n int); INSERT INTO kept VALUES (1)`)
	b := c.BaseBackup()
	if n := count(url, `INSERT INTO kept VALUES (2)`); n != 2 {
		t.Fatalf("original: %d rows", n)
	}
	r := b.Restore()
	restored := r.URL("backup_test")
	if restored == url {
		t.Fatal("the restored server has the original's address")
	}
	if n := count(restored, `SELECT 1`); n != 1 {
		t.Fatalf("restored: %d rows, want the 1 committed before the backup", n)
	}
	if n := count(restored, `INSERT INTO kept VALUES (3)`); n != 2 {
		t.Fatalf("restored after a write: %d rows", n)
	}
	if n := count(url, `SELECT 1`); n != 2 {
		t.Fatalf("original after the restore: %d rows", n)
	}
	if again := b.Restore(); count(again.URL("backup_test"), `SELECT 1`) != 1 {
		t.Fatal("a second restore of the backup does not hold what the first held")
	}
}
