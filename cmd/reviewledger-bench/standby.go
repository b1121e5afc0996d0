package main

// The synchronous standby's cost: rounds of reviewledger on a private
// primary with one streaming standby, the standby asynchronous, then
// synchronous (synchronous_standby_names '*' with synchronous_commit on:
// a commit, and so a 202, waits until the standby has the WAL on disk).
// Both on the same two servers, started here on free loopback ports in a
// temporary directory, with PostgreSQL's durable defaults (fsync on) and
// stopped at the end: the machine's own server is never touched.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgPair is a private primary and its streaming standby.
type pgPair struct {
	bin     string     // PostgreSQL's server binaries
	runAs   *user.User // nil: the current user
	dir     string
	primary int // ports
	standby int
}

// startPair creates and starts a primary and, from its base backup, a
// standby replaying its WAL.
func startPair(ctx context.Context) (p *pgPair, err error) {
	p = &pgPair{}
	if p.bin, err = pgBinDir(); err != nil {
		return nil, err
	}
	if os.Geteuid() == 0 { // PostgreSQL refuses to run as root
		if p.runAs, err = user.Lookup("postgres"); err != nil {
			return nil, fmt.Errorf("running as root needs the user postgres: %w", err)
		}
	}
	if p.dir, err = os.MkdirTemp("", "reviewledger-bench-standby-"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, p.stop())
		}
	}()
	if err = p.chown(p.dir); err != nil {
		return nil, err
	}
	if p.primary, err = freePort(); err != nil {
		return nil, err
	}
	if p.standby, err = freePort(); err != nil {
		return nil, err
	}
	if out, err := p.run(ctx, "initdb", "-D", p.data("primary"), "--auth=trust", "--username=postgres", "--encoding=UTF8"); err != nil {
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	if err := p.ctl(ctx, "primary", p.primary, "start"); err != nil {
		return nil, err
	}
	if out, err := p.run(ctx, "pg_basebackup", "-D", p.data("standby"), "-h", "127.0.0.1", "-p", strconv.Itoa(p.primary),
		"-U", "postgres", "-X", "stream", "-R", "--checkpoint=fast"); err != nil {
		return nil, fmt.Errorf("pg_basebackup: %w\n%s", err, out)
	}
	if err := p.ctl(ctx, "standby", p.standby, "start"); err != nil {
		return nil, err
	}
	return p, p.setSync(ctx, false)
}

// adminURL is the primary's maintenance database, for database().
func (p *pgPair) adminURL() string {
	u := url.URL{Scheme: "postgres", User: url.User("postgres"), Host: "127.0.0.1:" + strconv.Itoa(p.primary),
		Path: "/postgres", RawQuery: "sslmode=disable"}
	return u.String()
}

// setSync makes the standby synchronous or asynchronous and waits until
// the primary reports it so.
func (p *pgPair) setSync(ctx context.Context, on bool) error {
	conn, err := pgx.Connect(ctx, p.adminURL())
	if err != nil {
		return fmt.Errorf("standby primary: %w", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	names, want := "", "async"
	if on {
		names, want = "*", "sync"
	}
	if _, err := conn.Exec(ctx, `ALTER SYSTEM SET synchronous_standby_names = `+quoteLiteral(names)); err != nil {
		return fmt.Errorf("standby primary: synchronous_standby_names: %w", err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_reload_conf()`); err != nil {
		return fmt.Errorf("standby primary: reload: %w", err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		var state string
		err := conn.QueryRow(ctx, `SELECT sync_state FROM pg_stat_replication LIMIT 1`).Scan(&state)
		if err == nil && state == want {
			return nil
		}
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("standby primary: pg_stat_replication: %w", err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the standby is not %s after 60s (state %q)", want, state)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stop stops both servers and removes their files.
func (p *pgPair) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs []error
	for _, name := range []string{"standby", "primary"} {
		if _, err := os.Stat(filepath.Join(p.data(name), "postmaster.pid")); err != nil {
			continue // never started, or stopped
		}
		if out, err := p.run(ctx, "pg_ctl", "-D", p.data(name), "-m", "immediate", "-w", "stop"); err != nil {
			errs = append(errs, fmt.Errorf("stop the %s: %w\n%s", name, err, out))
		}
	}
	return errors.Join(append(errs, os.RemoveAll(p.dir))...)
}

func (p *pgPair) data(name string) string { return filepath.Join(p.dir, name) }

// ctl starts server name on port.
func (p *pgPair) ctl(ctx context.Context, name string, port int, action string) error {
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c max_connections=100", port, p.dir)
	out, err := p.run(ctx, "pg_ctl", "-D", p.data(name), "-l", filepath.Join(p.dir, name+".log"), "-o", opts, "-w", "-t", "60", action)
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(p.dir, name+".log"))
		return fmt.Errorf("%s the %s: %w\n%s\n%s", action, name, err, out, log)
	}
	return nil
}

// run runs a PostgreSQL binary as the servers' user.
func (p *pgPair) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	path := filepath.Join(p.bin, name)
	cmd := exec.CommandContext(ctx, path, args...)
	if p.runAs != nil {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", p.runAs.Username, "--", path}, args...)...)
	}
	cmd.Dir = p.dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

func (p *pgPair) chown(path string) error {
	if p.runAs == nil {
		return nil
	}
	uid, _ := strconv.Atoi(p.runAs.Uid)
	gid, _ := strconv.Atoi(p.runAs.Gid)
	return os.Chown(path, uid, gid)
}

// pgBinDir finds PostgreSQL's server binaries: pg_config's, or the newest
// under /usr/lib/postgresql.
func pgBinDir() (string, error) {
	var dirs []string
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		dirs = append(dirs, strings.TrimSpace(string(out)))
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(found, func(a, b string) int { return pgVersion(b) - pgVersion(a) })
	for _, dir := range append(dirs, found...) {
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir, nil
		}
	}
	return "", errors.New("-standby: no PostgreSQL server binaries (initdb, pg_ctl): install the postgresql package, or give -standby=false")
}

func pgVersion(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

func freePort() (int, error) {
	addr, err := freeAddr()
	if err != nil {
		return 0, err
	}
	_, port, _ := strings.Cut(addr, ":")
	return strconv.Atoi(port)
}

// standbyRun is the figures of the rounds on the private pair.
type standbyRun struct {
	async, sync []figures
}

// standbyRounds runs pairs of rounds of reviewledger on a private primary
// with a standby: asynchronous, then synchronous.
func standbyRounds(ctx context.Context, cfg Config, pairs int) (run *standbyRun, err error) {
	p, err := startPair(ctx)
	if err != nil {
		return nil, fmt.Errorf("standby: %w", err)
	}
	defer func() { err = errors.Join(err, p.stop()) }()
	cfg.AdminURL, cfg.Profile = p.adminURL(), ""
	cfg.pg = findPG(ctx, cfg.AdminURL)
	run = &standbyRun{}
	for range pairs {
		for _, sync := range []bool{false, true} {
			if err := p.setSync(ctx, sync); err != nil {
				return run, fmt.Errorf("standby: %w", err)
			}
			f, _, cleanup, err := reviewledgerRound(ctx, cfg)
			if cleanup != nil {
				err = errors.Join(err, cleanup())
			}
			if err != nil {
				return run, fmt.Errorf("standby (synchronous %t): %w", sync, err)
			}
			if sync {
				run.sync = append(run.sync, f)
			} else {
				run.async = append(run.async, f)
			}
		}
	}
	return run, nil
}

// print writes the medians of both kinds of round and their ratio.
func (s *standbyRun) print(w io.Writer) {
	if s == nil || len(s.async) == 0 || len(s.async) != len(s.sync) {
		return
	}
	med := func(fs []figures, f func(figures) float64) float64 {
		rs := make([]round, len(fs))
		for i, x := range fs {
			rs[i] = round{rl: x}
		}
		return median(rs, func(r round) float64 { return f(r.rl) })
	}
	rate := func(f figures) float64 { return f.PerSecond }
	p99 := func(f figures) float64 { return float64(f.P99) }
	fmt.Fprintf(w, "synchronous standby (a private primary and standby, fsync on, %d pairs of rounds): asynchronous %.0f/s p99 %s, synchronous %.0f/s p99 %s; ratio synchronous to asynchronous %.3f\n",
		len(s.async), med(s.async, rate), ms(time.Duration(med(s.async, p99))), med(s.sync, rate), ms(time.Duration(med(s.sync, p99))),
		med(s.sync, rate)/med(s.async, rate))
}

// quoteLiteral is s as an SQL string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
