// Package pgbouncer starts a private PgBouncer for a test, in front of a
// PostgreSQL server the test names (a private cluster, or the test
// database on the machine's server): its own configuration and log in a
// temporary directory, its own port on 127.0.0.1, trust authentication,
// transaction pooling, stopped by its process ID when the test ends.
//
// The binary is Debian's pgbouncer (/usr/sbin/pgbouncer). PgBouncer
// refuses to run as root, so as root it runs as the user postgres
// (runuser). Without the binary the test is skipped, saying why, or fails
// when CI is set.
package pgbouncer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Bouncer is a private PgBouncer.
type Bouncer struct {
	dir  string
	port int
	cmd  *exec.Cmd
}

// Bin is the pgbouncer binary; it skips tb (or fails it under CI) when
// there is none.
func Bin(tb testing.TB) string {
	tb.Helper()
	for _, p := range []string{"/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p
	}
	if os.Getenv("CI") != "" {
		tb.Fatal("pgbouncer is not installed (CI is set, so this fails): install the pgbouncer package")
	}
	tb.Skip("pgbouncer is not installed (the pgbouncer package): skipping the PgBouncer test")
	return ""
}

// Start starts PgBouncer in transaction pooling mode in front of the
// server of serverURL (any database on it), with at most poolSize server
// sessions per database and user.
func Start(tb testing.TB, serverURL string, poolSize int) *Bouncer {
	tb.Helper()
	bin := Bin(tb)
	target, err := url.Parse(serverURL)
	if err != nil {
		tb.Fatalf("pgbouncer: %v", err)
	}
	b := &Bouncer{}
	if b.dir, err = os.MkdirTemp("", "reviewledger-pgbouncer-"); err != nil {
		tb.Fatalf("pgbouncer: %v", err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(b.dir) })
	if b.port, err = freePort(); err != nil {
		tb.Fatalf("pgbouncer: %v", err)
	}
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
default_pool_size = %d
max_client_conn = 500
server_login_retry = 1
ignore_startup_parameters = extra_float_digits
logfile = %s
pidfile = %s
`, target.Hostname(), target.Port(), b.port, b.path("users.txt"), poolSize, b.path("pgbouncer.log"), b.path("pgbouncer.pid"))
	for name, text := range map[string]string{"pgbouncer.ini": ini, "users.txt": `"postgres" ""` + "\n"} {
		if err := os.WriteFile(b.path(name), []byte(text), 0o644); err != nil {
			tb.Fatalf("pgbouncer: %v", err)
		}
	}
	b.cmd = exec.Command(bin, b.path("pgbouncer.ini"))
	if os.Geteuid() == 0 {
		pg, err := user.Lookup("postgres")
		if err != nil {
			tb.Fatalf("pgbouncer: running as root needs the user postgres: %v", err)
		}
		uid, _ := strconv.Atoi(pg.Uid)
		gid, _ := strconv.Atoi(pg.Gid)
		if err := os.Chown(b.dir, uid, gid); err != nil {
			tb.Fatalf("pgbouncer: %v", err)
		}
		b.cmd = exec.Command("runuser", "-u", pg.Username, "--", bin, b.path("pgbouncer.ini"))
	}
	if err := b.cmd.Start(); err != nil {
		tb.Fatalf("pgbouncer: start: %v", err)
	}
	tb.Cleanup(b.stop)
	if err := b.wait(serverURL); err != nil {
		tb.Fatalf("pgbouncer: %v\n%s", err, b.Log())
	}
	return b
}

// URL is serverURL (a database of the server Start was given) reached
// through PgBouncer: its host and port are PgBouncer's.
func (b *Bouncer) URL(serverURL string) string {
	u, _ := url.Parse(serverURL)
	u.Host = "127.0.0.1:" + strconv.Itoa(b.port)
	return u.String()
}

// Log is PgBouncer's log so far.
func (b *Bouncer) Log() string {
	out, _ := os.ReadFile(b.path("pgbouncer.log"))
	return string(out)
}

func (b *Bouncer) path(name string) string { return filepath.Join(b.dir, name) }

// wait polls until a query through PgBouncer answers.
func (b *Bouncer) wait(serverURL string) error {
	deadline := time.Now().Add(30 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var conn *pgx.Conn
		cfg, perr := pgx.ParseConfig(b.URL(serverURL))
		if perr != nil {
			cancel()
			return perr
		}
		cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
		if conn, err = pgx.ConnectConfig(ctx, cfg); err == nil {
			_, err = conn.Exec(ctx, "SELECT 1")
			_ = conn.Close(ctx)
		}
		cancel()
		if err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("did not answer within 30s: %w", err)
}

// stop stops PgBouncer by the process ID in its pidfile (runuser's child
// when run as root), then waits for it.
func (b *Bouncer) stop() {
	pid := b.cmd.Process.Pid
	if raw, err := os.ReadFile(b.path("pgbouncer.pid")); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(raw))); err == nil {
			pid = n
		}
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		_ = b.cmd.Process.Kill()
	}
	done := make(chan struct{})
	go func() { _ = b.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(pid, syscall.SIGKILL)
		_ = b.cmd.Process.Kill()
		<-done
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
