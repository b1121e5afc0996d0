// Package cluster starts a private PostgreSQL server for a test: its own
// data directory (initdb), its own port on 127.0.0.1, stopped and removed
// when the test ends. Fault tests restart it, or kill it with SIGKILL and
// start it again, without touching the shared server every other test uses.
//
// The server binaries are PostgreSQL's own (pg_config --bindir, or the
// newest under /usr/lib/postgresql). Run as root, the server runs as the
// user postgres (runuser), as PostgreSQL refuses to run as root.
package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Cluster is a private PostgreSQL server.
type Cluster struct {
	tb      testing.TB
	bin     string
	dir     string // owned by the server's user: data/, the socket, the log
	port    int
	runAs   *user.User // nil: the current user
	started bool
}

// Start creates and starts a server. It fails the test when PostgreSQL's
// binaries are missing; it never skips.
func Start(tb testing.TB) *Cluster {
	tb.Helper()
	c := &Cluster{tb: tb}
	var err error
	if c.bin, err = binDir(); err != nil {
		tb.Fatalf("cluster: %v", err)
	}
	if os.Geteuid() == 0 {
		if c.runAs, err = user.Lookup("postgres"); err != nil {
			tb.Fatalf("cluster: running as root needs the user postgres: %v", err)
		}
	}
	if c.dir, err = os.MkdirTemp("", "reviewledger-pg-"); err != nil {
		tb.Fatalf("cluster: %v", err)
	}
	tb.Cleanup(c.remove)
	if err := c.chown(c.dir); err != nil {
		tb.Fatalf("cluster: %v", err)
	}
	if c.port, err = freePort(); err != nil {
		tb.Fatalf("cluster: %v", err)
	}
	if out, err := c.run("initdb", "-D", c.data(), "--auth=trust", "--username=postgres", "--encoding=UTF8", "--no-sync"); err != nil {
		tb.Fatalf("cluster: initdb: %v\n%s", err, out)
	}
	c.StartAgain()
	return c
}

// URL is the connection string of database db on the server.
func (c *Cluster) URL(db string) string {
	u := url.URL{Scheme: "postgres", User: url.User("postgres"), Host: "127.0.0.1:" + strconv.Itoa(c.port), Path: "/" + db,
		RawQuery: "sslmode=disable"}
	return u.String()
}

// CreateDatabase creates database db and returns its URL.
func (c *Cluster) CreateDatabase(db string) string {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		c.tb.Fatalf("cluster: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize()); err != nil {
		c.tb.Fatalf("cluster: create database %s: %v", db, err)
	}
	return c.URL(db)
}

// Restart stops the server (fast: sessions are ended) and starts it again.
func (c *Cluster) Restart() {
	c.tb.Helper()
	if out, err := c.ctl("restart", "-m", "fast"); err != nil {
		c.tb.Fatalf("cluster: restart: %v\n%s\n%s", err, out, c.Log())
	}
}

// Kill ends the server and its every process with SIGKILL, as a crash
// would; StartAgain brings it back (through crash recovery).
func (c *Cluster) Kill() {
	c.tb.Helper()
	pid, err := c.postmaster()
	if err != nil {
		c.tb.Fatalf("cluster: %v", err)
	}
	victims := append(children(pid), pid)
	for _, p := range victims {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, p := range victims {
		for syscall.Kill(p, 0) == nil && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	c.started = false
}

// StartAgain starts the server after Kill (or Start's first start).
func (c *Cluster) StartAgain() {
	c.tb.Helper()
	if out, err := c.ctl("start"); err != nil {
		c.tb.Fatalf("cluster: start: %v\n%s\n%s", err, out, c.Log())
	}
	c.started = true
}

// Replica creates and starts a streaming replica of the server: a base
// backup (pg_basebackup, which writes standby.signal and primary_conninfo
// with -R) into a directory of its own, on a port of its own, replaying
// the primary's WAL as a hot standby. It is stopped and removed when the
// test ends; Stop, Kill and StartAgain work on it as on any server.
func (c *Cluster) Replica() *Cluster {
	c.tb.Helper()
	r := &Cluster{tb: c.tb, bin: c.bin, runAs: c.runAs}
	var err error
	if r.dir, err = os.MkdirTemp("", "reviewledger-pg-replica-"); err != nil {
		c.tb.Fatalf("cluster: %v", err)
	}
	c.tb.Cleanup(r.remove)
	if err := r.chown(r.dir); err != nil {
		c.tb.Fatalf("cluster: %v", err)
	}
	if r.port, err = freePort(); err != nil {
		c.tb.Fatalf("cluster: %v", err)
	}
	if out, err := r.run("pg_basebackup", "-D", r.data(), "-h", "127.0.0.1", "-p", strconv.Itoa(c.port), "-U", "postgres",
		"-X", "stream", "-R", "--checkpoint=fast", "--no-sync"); err != nil {
		c.tb.Fatalf("cluster: pg_basebackup: %v\n%s", err, out)
	}
	r.StartAgain()
	return r
}

// Backup is a base backup of a server, as an operator takes one
// (pg_basebackup with the WAL it needs): restored, it is the server as it
// was when the backup ended.
type Backup struct {
	tb   testing.TB
	from *Cluster
	dir  string // owned by the server's user: data/
}

// BaseBackup takes a base backup of the running server into a directory
// of its own, removed when the test ends.
func (c *Cluster) BaseBackup() *Backup {
	c.tb.Helper()
	b := &Backup{tb: c.tb, from: c}
	var err error
	if b.dir, err = os.MkdirTemp("", "reviewledger-pg-backup-"); err != nil {
		c.tb.Fatalf("cluster: %v", err)
	}
	c.tb.Cleanup(func() { _ = os.RemoveAll(b.dir) })
	if err := c.chown(b.dir); err != nil {
		c.tb.Fatalf("cluster: %v", err)
	}
	if out, err := c.run("pg_basebackup", "-D", filepath.Join(b.dir, "data"), "-h", "127.0.0.1", "-p", strconv.Itoa(c.port), "-U", "postgres",
		"-X", "stream", "--checkpoint=fast", "--no-sync"); err != nil {
		c.tb.Fatalf("cluster: pg_basebackup: %v\n%s", err, out)
	}
	return b
}

// Restore starts a new server from a copy of the backup, in a directory of
// its own, on a port of its own, as a restore to a new machine would: it
// recovers to the end of the backup and then takes writes. The backup
// stays as it was. The server is stopped and removed when the test ends.
func (b *Backup) Restore() *Cluster {
	b.tb.Helper()
	r := &Cluster{tb: b.tb, bin: b.from.bin, runAs: b.from.runAs}
	var err error
	if r.dir, err = os.MkdirTemp("", "reviewledger-pg-restored-"); err != nil {
		b.tb.Fatalf("cluster: %v", err)
	}
	b.tb.Cleanup(r.remove)
	if err := r.chown(r.dir); err != nil {
		b.tb.Fatalf("cluster: %v", err)
	}
	if r.port, err = freePort(); err != nil {
		b.tb.Fatalf("cluster: %v", err)
	}
	// cp -a keeps the files' owner and modes (0700 on data/, as the server
	// wants).
	if out, err := exec.Command("cp", "-a", filepath.Join(b.dir, "data"), r.data()).CombinedOutput(); err != nil {
		b.tb.Fatalf("cluster: copy the backup: %v\n%s", err, out)
	}
	r.StartAgain()
	return r
}

// Stop stops the server (fast: sessions are ended); StartAgain starts it.
func (c *Cluster) Stop() {
	c.tb.Helper()
	if out, err := c.ctl("stop", "-m", "fast"); err != nil {
		c.tb.Fatalf("cluster: stop: %v\n%s\n%s", err, out, c.Log())
	}
	c.started = false
}

// Log returns the server's log so far.
func (c *Cluster) Log() string {
	b, _ := os.ReadFile(filepath.Join(c.dir, "server.log"))
	return string(b)
}

func (c *Cluster) data() string { return filepath.Join(c.dir, "data") }

// ctl runs pg_ctl with the server's options, waiting for it to finish.
func (c *Cluster) ctl(action string, args ...string) ([]byte, error) {
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c max_connections=60 -c fsync=off", c.port, c.dir)
	all := append([]string{"-D", c.data(), "-l", filepath.Join(c.dir, "server.log"), "-o", opts, "-w", "-t", "60", action}, args...)
	return c.run("pg_ctl", all...)
}

// run runs a PostgreSQL binary as the server's user.
func (c *Cluster) run(name string, args ...string) ([]byte, error) {
	path := filepath.Join(c.bin, name)
	var cmd *exec.Cmd
	if c.runAs != nil {
		cmd = exec.Command("runuser", append([]string{"-u", c.runAs.Username, "--", path}, args...)...)
	} else {
		cmd = exec.Command(path, args...)
	}
	cmd.Dir = c.dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

func (c *Cluster) chown(path string) error {
	if c.runAs == nil {
		return nil
	}
	uid, _ := strconv.Atoi(c.runAs.Uid)
	gid, _ := strconv.Atoi(c.runAs.Gid)
	return os.Chown(path, uid, gid)
}

// postmaster returns the server's process ID, from postmaster.pid.
func (c *Cluster) postmaster() (int, error) {
	b, err := os.ReadFile(filepath.Join(c.data(), "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strconv.Atoi(strings.TrimSpace(line))
}

func (c *Cluster) remove() {
	if c.started {
		if out, err := c.ctl("stop", "-m", "immediate"); err != nil {
			c.tb.Logf("cluster: stop: %v\n%s", err, out)
		}
	}
	_ = os.RemoveAll(c.dir)
}

// children lists the processes whose parent is pid.
func children(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after ')'.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(stat[i+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			out = append(out, p)
		}
	}
	return out
}

// binDir finds PostgreSQL's server binaries.
func binDir() (string, error) {
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		dir := strings.TrimSpace(string(out))
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, dir := range dirs {
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir, nil
		}
	}
	return "", errors.New("no PostgreSQL server binaries (initdb, pg_ctl): install the postgresql package")
}

func version(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// BinDir returns the directory of PostgreSQL's server binaries, for kits
// that run them another way (the patroni kit hands it to Patroni).
func BinDir() (string, error) { return binDir() }

// FreePort returns a port on 127.0.0.1 nothing listens on now.
func FreePort() (int, error) { return freePort() }
