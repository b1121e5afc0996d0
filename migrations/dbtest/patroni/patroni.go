// Package patroni starts a private high-availability PostgreSQL for a test
// or for `.ci/ha`: a three-member etcd and three Patroni nodes, each with
// its own PostgreSQL, all on free ports on 127.0.0.1 in one temporary
// directory. It never touches the machine's own server. Faults are made
// the way they happen: the SIGKILL of a node's postmaster (KillPostgres)
// or of its Patroni agent (KillAgent), a planned switchover through
// patronictl (Switchover); an agent started again (StartAgent) brings its
// node back as a replica, rewound with pg_rewind when it was the primary.
//
// The timings are short so that a failover takes seconds: the leader key
// lives DCSTTL, the agents loop every LoopWait and give up on etcd and
// PostgreSQL after RetryTimeout. Run as root, everything runs as the
// user postgres (runuser); everything started is stopped by its process
// group when Stop is called, and the directory removed (kept, for a look
// at the logs, when PATRONI_KEEP_DIR is set).
package patroni

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reviewledger/reviewledger/migrations/dbtest/cluster"
)

// The timings of the Patroni cluster (the DCS section of its bootstrap).
const (
	DCSTTL       = 10 * time.Second
	LoopWait     = 2 * time.Second
	RetryTimeout = 4 * time.Second
)

// Options say how the cluster is set up.
type Options struct {
	// SynchronousMode makes the leader wait, at every commit, for one
	// replica (Patroni's synchronous_mode), so that a commit is on two
	// machines before it is acknowledged; strictly
	// (synchronous_mode_strict): a leader with no synchronous standby yet,
	// just promoted or with every replica gone, makes commits wait rather
	// than acknowledge them on one machine.
	SynchronousMode bool
	// Logf receives what the kit does; nil: nothing is logged.
	Logf func(format string, args ...any)
}

// Cluster is a running etcd and Patroni cluster.
type Cluster struct {
	opts      Options
	dir       string
	bin       string
	runAs     *user.User
	scope     string
	etcd      []*process
	etcdHosts []string
	Members   []*Member
}

// Start sets up and starts the cluster and waits until it is healthy: a
// leader and two streaming replicas (one of them synchronous in
// synchronous mode). On error, whatever was started is stopped.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	c := &Cluster{opts: opts, scope: "reviewledger"}
	if c.bin, err = cluster.BinDir(); err != nil {
		return nil, err
	}
	for _, tool := range []string{"etcd", "patroni", "patronictl"} {
		if _, err := lookPath(tool); err != nil {
			return nil, fmt.Errorf("%w: %s: install the Debian packages patroni, etcd-server and etcd-client", ErrMissing, tool)
		}
	}
	if os.Geteuid() == 0 {
		if c.runAs, err = user.Lookup("postgres"); err != nil {
			return nil, fmt.Errorf("running as root needs the user postgres: %w", err)
		}
	}
	if c.dir, err = os.MkdirTemp("", "reviewledger-patroni-"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	if err := c.chown(c.dir); err != nil {
		return nil, err
	}
	if err := c.startEtcd(ctx); err != nil {
		return nil, err
	}
	if err := c.startMembers(); err != nil {
		return nil, err
	}
	if err := c.WaitHealthy(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// Dir is the directory everything lives in (configurations, data, logs).
func (c *Cluster) Dir() string { return c.dir }

// URL is the connection string of database db on whichever node is the
// primary: every node's address, and target_session_attrs=read-write, so
// a client connects to the one that takes writes.
func (c *Cluster) URL(db string) string { return c.url(db, "read-write") }

// ReadURL is the connection string of database db for reads: a standby
// when one answers, the primary otherwise (prefer-standby).
func (c *Cluster) ReadURL(db string) string { return c.url(db, "prefer-standby") }

func (c *Cluster) url(db, attrs string) string {
	hosts := make([]string, len(c.Members))
	for i, m := range c.Members {
		hosts[i] = "127.0.0.1:" + strconv.Itoa(m.PGPort)
	}
	u := url.URL{Scheme: "postgres", User: url.User("postgres"), Host: strings.Join(hosts, ","), Path: "/" + db,
		RawQuery: "target_session_attrs=" + attrs + "&sslmode=disable"}
	return u.String()
}

// CreateDatabase creates database db on the primary, waits until every
// replica has replayed it, and returns its URL. (A client of the
// multi-host URL that is handed a replica without the database first
// would fail there: libpq and pgx try no further host after "database
// does not exist".)
func (c *Cluster) CreateDatabase(ctx context.Context, db string) (string, error) {
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return "", fmt.Errorf("connect to the primary: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize()); err != nil {
		return "", fmt.Errorf("create database %s: %w", db, err)
	}
	for _, m := range c.Members {
		url := m.URL(db)
		err := poll(ctx, "database "+db+" on "+m.Name, func() (bool, string) {
			conn, err := pgx.Connect(ctx, url)
			if err != nil {
				return false, err.Error()
			}
			conn.Close(context.Background())
			return true, ""
		})
		if err != nil {
			return "", err
		}
	}
	return c.URL(db), nil
}

// Member returns the member called name.
func (c *Cluster) Member(name string) (*Member, error) {
	for _, m := range c.Members {
		if m.Name == name {
			return m, nil
		}
	}
	return nil, fmt.Errorf("no member %q", name)
}

// Stop stops every agent (which stops its PostgreSQL), then whatever
// PostgreSQL is left and etcd, each by its process group, and removes the
// directory. It may be called more than once.
func (c *Cluster) Stop() {
	for _, m := range c.Members {
		m.stopAgent(20 * time.Second)
	}
	for _, m := range c.Members {
		_ = m.killPostmaster()
	}
	for _, e := range c.etcd {
		e.stop(10 * time.Second)
	}
	if c.dir != "" && os.Getenv("PATRONI_KEEP_DIR") == "" {
		_ = os.RemoveAll(c.dir)
	}
}

// Logs returns the end of every agent's and etcd member's log, for a
// failing test to print.
func (c *Cluster) Logs() string {
	var b strings.Builder
	for _, m := range c.Members {
		for _, name := range []string{"patroni.log", "postgresql.log"} {
			fmt.Fprintf(&b, "--- %s %s\n%s\n", m.Name, name, tail(filepath.Join(m.dir, name), 4000))
		}
	}
	return b.String()
}

func (c *Cluster) logf(format string, args ...any) {
	if c.opts.Logf != nil {
		c.opts.Logf(format, args...)
	}
}

func (c *Cluster) chown(path string) error {
	if c.runAs == nil {
		return nil
	}
	uid, _ := strconv.Atoi(c.runAs.Uid)
	gid, _ := strconv.Atoi(c.runAs.Gid)
	return os.Chown(path, uid, gid)
}

// mkdir creates a directory the cluster's user owns.
func (c *Cluster) mkdir(path string) error {
	if err := os.MkdirAll(path, 0o700); err != nil {
		return err
	}
	return c.chown(path)
}

// writeFile writes a file the cluster's user owns.
func (c *Cluster) writeFile(path, content string) error {
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		return err
	}
	return c.chown(path)
}

// ports returns n free ports.
func ports(n int) ([]int, error) {
	out := make([]int, 0, n)
	seen := map[int]bool{}
	for len(out) < n {
		p, err := cluster.FreePort()
		if err != nil {
			return nil, err
		}
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out, nil
}

// poll runs cond until it returns true, or ctx ends: then the error says
// what was waited for and what cond saw last.
func poll(ctx context.Context, what string, cond func() (bool, string)) error {
	last := ""
	for {
		ok, seen := cond()
		if ok {
			return nil
		}
		if seen != "" {
			last = seen
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last seen: %s)", what, ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

var errNoLeader = errors.New("no leader")

// ErrMissing is matched by Start's error when etcd or Patroni is not
// installed.
var ErrMissing = errors.New("not installed")
