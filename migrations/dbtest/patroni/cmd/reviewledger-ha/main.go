// Command reviewledger-ha starts the private Patroni cluster of package
// patroni (three etcd members, three PostgreSQL nodes under Patroni, all
// on loopback ports in a temporary directory) and prints the
// DATABASE_URL and REVIEWLEDGER_READ_DATABASE_URL that reach it. It runs
// until interrupted, then stops everything it started. With -check it
// runs a short drill instead and exits 0, or 1 naming what failed: a
// write, the SIGKILL of the leader's PostgreSQL, a write taken by the new
// leader through the same URL, the old leader back as a replica, and
// both writes there. .ci/ha runs it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reviewledger/reviewledger/migrations/dbtest/patroni"
)

func main() {
	check := flag.Bool("check", false, "run a short failover drill, stop everything and exit 0 or 1")
	sync := flag.Bool("synchronous", true, "Patroni's synchronous_mode: a commit waits for one replica")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, *check, *sync)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "ha: FAIL: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, check, sync bool) error {
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "ha: "+format+"\n", args...) }
	startCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	c, err := patroni.Start(startCtx, patroni.Options{SynchronousMode: sync, Logf: logf})
	if err != nil {
		return err
	}
	defer c.Stop()
	url, err := c.CreateDatabase(startCtx, "reviewledger")
	if err != nil {
		return err
	}
	fmt.Printf("DATABASE_URL='%s'\nREVIEWLEDGER_READ_DATABASE_URL='%s'\n", url, c.ReadURL("reviewledger"))
	if !check {
		logf("running in %s until interrupted (Ctrl-C)", c.Dir())
		<-ctx.Done()
		logf("stopping")
		return nil
	}
	drillCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := drill(drillCtx, c, url, logf); err != nil {
		return fmt.Errorf("%w\n%s", err, c.Logs())
	}
	logf("check passed")
	return nil
}

// drill writes, kills the leader's PostgreSQL, writes again through the
// same URL, and waits for the old leader to follow the new one with both
// writes.
func drill(ctx context.Context, c *patroni.Cluster, url string, logf func(string, ...any)) error {
	if err := exec(ctx, url, `CREATE TABLE drill (n int PRIMARY KEY)`); err != nil {
		return err
	}
	if err := exec(ctx, url, `INSERT INTO drill VALUES (1)`); err != nil {
		return err
	}
	old, err := c.Leader(ctx)
	if err != nil {
		return err
	}
	if err := old.KillPostgres(); err != nil {
		return err
	}
	killed := time.Now()
	for exec(ctx, url, `INSERT INTO drill VALUES (2)`) != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("no write taken after the kill of %s: %w", old.Name, ctx.Err())
		}
		time.Sleep(100 * time.Millisecond)
	}
	leader, err := c.Leader(ctx)
	if err != nil {
		return err
	}
	logf("%s killed; %s took a write %s later", old.Name, leader.Name, time.Since(killed).Round(10*time.Millisecond))
	if leader == old {
		return fmt.Errorf("%s still leads after its PostgreSQL was killed", old.Name)
	}
	if err := c.WaitReplica(ctx, old); err != nil {
		return err
	}
	var n int
	err = poll(ctx, func() error { return scan(ctx, old.URL("reviewledger"), `SELECT count(*) FROM drill`, &n, 2) })
	if err != nil {
		return fmt.Errorf("the old leader %s as a replica: %w", old.Name, err)
	}
	logf("%s rejoined as a replica with both writes", old.Name)
	return nil
}

func exec(ctx context.Context, url, sql string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// scan reads one integer with sql and fails unless it is want.
func scan(ctx context.Context, url, sql string, n *int, want int) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(ctx, sql).Scan(n); err != nil {
		return err
	}
	if *n != want {
		return fmt.Errorf("%d rows, want %d", *n, want)
	}
	return nil
}

// poll runs f until it succeeds or ctx ends.
func poll(ctx context.Context, f func() error) error {
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
